package wire

// QueueWeight is one -q entry: a queue and its weight (0 = no weight
// given). The process info's "queues" and "weights" are written from it.
type QueueWeight struct {
	Name   string
	Weight int
}
