package fetch

import (
	"errors"
	"strconv"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// The rounds' commands, encoded here in RESP (the Redis protocol) and
// written with redisx.RawWriter when the connection takes it: a move's
// and a positional acknowledgement's commands never change for a list, so
// each list keeps them encoded (slotList), and a round is a few appends.
// Through redigo's Send every argument of every command was converted and
// written again, about a tenth of gojob's CPU on the bench.

// appendCmd appends the command args to buf.
func appendCmd(buf []byte, args ...string) []byte {
	buf = appendHeader(buf, '*', len(args))
	for _, a := range args {
		buf = appendHeader(buf, '$', len(a))
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}

// appendLREM appends `LREM list -1 raw`.
func appendLREM(buf []byte, list string, raw []byte) []byte {
	buf = append(buf, "*4\r\n$4\r\nLREM\r\n"...)
	buf = appendHeader(buf, '$', len(list))
	buf = append(buf, list...)
	buf = append(buf, "\r\n$2\r\n-1\r\n"...)
	buf = appendHeader(buf, '$', len(raw))
	buf = append(buf, raw...)
	return append(buf, '\r', '\n')
}

func appendHeader(buf []byte, kind byte, n int) []byte {
	buf = append(buf, kind)
	buf = strconv.AppendInt(buf, int64(n), 10)
	return append(buf, '\r', '\n')
}

// replies reads a round's replies: straight from the connection's read
// buffer when the round was written encoded (redisx.ReplyReader), else
// through redigo.
type replies struct {
	c  redis.Conn
	rr redisx.ReplyReader
}

// newReplies starts reading the replies of what was just written on c,
// encoded when raw.
func newReplies(c redis.Conn, raw bool) (replies, error) {
	r := replies{c: c}
	if !raw {
		return r, nil
	}
	rr, ok := redisx.Replies(c)
	if !ok {
		return r, nil
	}
	r.rr = rr
	return r, rr.StartReplies()
}

// next reads the next reply; an error reply is a reply, the error is the
// connection's.
func (r *replies) next(rep *redisx.Reply) error {
	if r.rr != nil {
		return r.rr.ReadReply(rep)
	}
	v, err := receiveReply(r.c)
	if err != nil {
		return err
	}
	*rep = redisx.ReplyOf(v)
	return nil
}

// keepBuf returns buf emptied for the next round, or nil when it grew
// past what is worth keeping (a round of large payloads by value).
func keepBuf(buf []byte) []byte {
	if cap(buf) > 64<<10 {
		return nil
	}
	return buf[:0]
}

// receiveReply reads one reply of a pipeline, an error reply as a value
// (redis.Error) rather than as the error: every reply of a round is read,
// whatever some of them say, so that the next round's replies are its
// own. The error is the connection's.
func receiveReply(c redis.Conn) (any, error) {
	v, err := c.Receive()
	if err == nil {
		return v, nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return re, nil
	}
	return v, err
}
