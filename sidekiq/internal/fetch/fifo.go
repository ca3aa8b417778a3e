package fetch

// fifo is a queue, oldest first, that takes from the front by moving an
// index: a take moves none of the items left (a slot's jobs fetched ahead
// pop one per job run; a backlog of acknowledgements is taken a batch at
// a time), and a push reuses the room taken once the slice is full.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

// front is the oldest item; the queue is not empty.
func (q *fifo[T]) front() *T { return &q.items[q.head] }

func (q *fifo[T]) push(xs ...T) {
	if q.head > 0 && len(q.items)+len(xs) > cap(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, xs...)
}

// take removes up to max of the oldest items and appends them to buf.
func (q *fifo[T]) take(buf []T, max int) []T {
	n := min(max, q.len())
	buf = append(buf, q.items[q.head:q.head+n]...)
	q.drop(n)
	return buf
}

// pop removes and returns the oldest item; the queue is not empty.
func (q *fifo[T]) pop() T {
	x := *q.front()
	q.drop(1)
	return x
}

// drop removes the n oldest items.
func (q *fifo[T]) drop(n int) {
	clear(q.items[q.head : q.head+n])
	q.head += n
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
}
