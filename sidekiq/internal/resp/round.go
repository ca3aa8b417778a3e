package resp

import (
	"errors"

	"github.com/gomodule/redigo/redis"
)

// RoundReader reads a round's replies: straight from the connection's
// read buffer when the round was written encoded (ReplyReader), else
// through redigo.
type RoundReader struct {
	c  redis.Conn
	rr ReplyReader
}

// NewRoundReader starts reading the replies of what was just written on
// c, encoded when raw.
func NewRoundReader(c redis.Conn, raw bool) (RoundReader, error) {
	r := RoundReader{c: c}
	if !raw {
		return r, nil
	}
	rr, ok := Replies(c)
	if !ok {
		return r, nil
	}
	r.rr = rr
	return r, rr.StartReplies()
}

// Next reads the next reply; an error reply is a reply, the error is the
// connection's.
func (r *RoundReader) Next(rep *Reply) error {
	if r.rr != nil {
		return r.rr.ReadReply(rep)
	}
	v, err := Receive(r.c)
	if err != nil {
		return err
	}
	*rep = ReplyOf(v)
	return nil
}

// Receive reads one reply of a pipeline, an error reply as a value
// (redis.Error) rather than as the error: every reply of a round is read,
// whatever some of them say, so that the next round's replies are its
// own. The error is the connection's.
func Receive(c redis.Conn) (any, error) {
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
