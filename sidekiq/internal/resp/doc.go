// Package resp is gojob's raw path to Redis beside redigo, for the
// reliable fetch's rounds only: every other command goes through redigo.
//
// Why it exists: a fetch round carries, per job, a move (LMOVE) and an
// acknowledgement (LTRIM by position, or LREM with the job's bytes), and
// their replies. Through redigo, each argument of each command is
// converted and written again (Send), a round of payloads reaches the
// socket in 4096-byte pieces, one system call each, and each reply is
// read into redigo's buffer, allocated and boxed in an interface: about a
// tenth of gojob's CPU per job and two allocations per job on the bench
// (docs/benchmarks.md). Here a list's commands are encoded once
// (AppendCmd) and a round is a few appends, written in one write on a
// corked connection (Cork, RawWriter), and its replies are parsed from
// the connection's read buffer (ReplyReader) into a Reply, bulk payloads
// carved from a shared slab.
//
// The connections are still redigo's (DialCorkable wraps the network
// connection under a redis.Conn), so a connection that is not corkable,
// or a caller that does not need the speed, falls back to redigo's Send
// and Receive (RoundReader). BenchmarkRound compares the two writes of
// one round.
package resp
