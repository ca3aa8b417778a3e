package resp

import (
	"bufio"
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Reading the replies of commands written with WriteRaw.
//
// redigo reads a reply into its own 4096-byte buffer (copied from the
// connection's), allocates the bulk's bytes and boxes every reply in an
// interface: two allocations per fetched job and a tenth of the fetch's
// CPU. A ReplyReader parses RESP straight from the connection's read
// buffer (corkNetConn.rd) into a Reply, and carves bulk payloads out of a
// shared slab: one allocation per slab instead of one per job.

// ReplyKind is the kind of a RESP2 reply.
type ReplyKind uint8

const (
	ReplyNil    ReplyKind = iota // a nil bulk ($-1) or nil array (*-1)
	ReplyBulk                    // Bytes
	ReplyInt                     // Int
	ReplyStatus                  // Text, without the '+'
	ReplyError                   // Text, without the '-'
)

// Reply is one reply. Bytes is the bulk's own memory: nothing else ever
// writes to it.
type Reply struct {
	Kind  ReplyKind
	Bytes []byte
	Int   int64
	Text  string
}

// Err returns the reply as redigo's redis.Error when it is an error
// reply, else nil.
func (r *Reply) Err() error {
	if r.Kind == ReplyError {
		return redis.Error(r.Text)
	}
	return nil
}

// ReplyOf converts one of redigo's replies (as Receive returns it, an
// error reply as a redis.Error value) to a Reply. Arrays, which the
// commands read this way never answer, become an error reply.
func ReplyOf(v any) Reply {
	switch v := v.(type) {
	case nil:
		return Reply{Kind: ReplyNil}
	case []byte:
		return Reply{Kind: ReplyBulk, Bytes: v}
	case int64:
		return Reply{Kind: ReplyInt, Int: v}
	case string:
		return Reply{Kind: ReplyStatus, Text: v}
	case redis.Error:
		return Reply{Kind: ReplyError, Text: string(v)}
	}
	return Reply{Kind: ReplyError, Text: "resp: unexpected reply"}
}

// ReplyReader reads, in order, the replies of commands a connection sent
// with WriteRaw. Nothing redigo has read from the connection may be
// unread (every earlier command's reply was received), and the replies
// read here must not also be received through redigo. An error is the
// connection's: it is closed, so that the next command fails.
type ReplyReader interface {
	// StartReplies bounds the reading of the replies that follow, up to
	// the next StartReplies, by the connection's read timeout (none when
	// it has none).
	StartReplies() error
	ReadReply(r *Reply) error
}

// Replies returns c as a ReplyReader when it takes encoded commands (Raw).
func Replies(c redis.Conn) (ReplyReader, bool) {
	k, ok := c.(*corkConn)
	if !ok || k.nc.tls {
		return nil, false
	}
	return k, true
}

// slabSize is the size of the slabs bulk payloads are carved from; a
// larger payload gets a slab of its own size.
const slabSize = 32 << 10

// errProtocol is a reply that is not RESP2 as these commands answer it.
var errProtocol = errors.New("resp: malformed reply")

func (c *corkConn) StartReplies() error {
	var deadline time.Time
	if c.nc.readTimeout > 0 {
		deadline = time.Now().Add(c.nc.readTimeout)
	} else if !c.nc.deadline {
		return nil // none set, none to clear
	}
	c.nc.deadline = c.nc.readTimeout > 0
	if err := c.nc.Conn.SetReadDeadline(deadline); err != nil {
		c.fullConn.Close()
		return err
	}
	return nil
}

func (c *corkConn) ReadReply(r *Reply) error {
	if err := c.nc.readReply(r); err != nil {
		c.fullConn.Close()
		return err
	}
	return nil
}

func (c *corkNetConn) readReply(r *Reply) error {
	if c.rd == nil {
		c.rd = bufio.NewReaderSize(c.Conn, readBuffer)
	}
	line, err := c.rd.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return errProtocol
		}
		return err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return errProtocol
	}
	kind, body := line[0], line[1:len(line)-2]
	*r = Reply{}
	switch kind {
	case '$':
		n, ok := parseLen(body)
		if !ok {
			return errProtocol
		}
		if n < 0 {
			r.Kind = ReplyNil
			return nil
		}
		r.Kind, r.Bytes = ReplyBulk, c.carve(n)
		if _, err := readFull(c.rd, r.Bytes); err != nil {
			return err
		}
		crlf, err := c.rd.Peek(2)
		if err != nil {
			return err
		}
		if crlf[0] != '\r' || crlf[1] != '\n' {
			return errProtocol
		}
		c.rd.Discard(2)
		return nil
	case ':':
		n, ok := parseInt(body)
		if !ok {
			return errProtocol
		}
		r.Kind, r.Int = ReplyInt, n
		return nil
	case '+':
		r.Kind = ReplyStatus
		if bytes.Equal(body, okStatus) {
			r.Text = "OK"
		} else {
			r.Text = string(body)
		}
		return nil
	case '-':
		r.Kind, r.Text = ReplyError, string(body)
		return nil
	case '*':
		if n, ok := parseLen(body); ok && n < 0 {
			r.Kind = ReplyNil
			return nil
		}
	}
	return errProtocol
}

var okStatus = []byte("OK")

// carve returns n bytes of the current slab, starting a new one when it
// has not room for them. A carved piece is never handed out again, so
// it stays the reply's own however long it is kept.
func (c *corkNetConn) carve(n int) []byte {
	if cap(c.slab)-len(c.slab) < n {
		if n >= slabSize/4 {
			return make([]byte, n)
		}
		c.slab = make([]byte, 0, slabSize)
	}
	from := len(c.slab)
	c.slab = c.slab[:from+n]
	return c.slab[from : from+n : from+n]
}

func readFull(rd *bufio.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := rd.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// parseLen parses a bulk or array length: -1 or a non-negative decimal.
func parseLen(b []byte) (int, bool) {
	if len(b) == 2 && b[0] == '-' && b[1] == '1' {
		return -1, true
	}
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, true
}

func parseInt(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(b), 10, 64) // no allocation: the conversion does not escape
	return n, err == nil
}
