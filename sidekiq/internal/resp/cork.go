package resp

import (
	"bufio"
	"context"
	"errors"
	"net"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A corked connection holds back what it writes until it is uncorked,
// then sends it in one write.
//
// redigo buffers a connection's commands in a 4096-byte bufio.Writer
// (redigo 1.9.3, redis/conn.go) and writes whenever it fills, so a round
// of commands that carries job payloads (a fetch whose acknowledgements
// ride with it: an LREM with the job's bytes each) reached the socket in
// two or three writes. On a TCP connection each write costs a system call,
// and on loopback the kernel runs Redis's receive path inside it and
// wakes Redis again; Redis in turn reads and parses the round piecemeal.
// Corked, a round is one write however large.

// Corker is a connection that can be corked (Dialer's connections are).
type Corker interface {
	// Cork holds back every write from now on.
	Cork()
	// Uncork sends what was held back in one write and stops holding;
	// its error is the connection's (the connection is then unusable).
	Uncork() error
}

// RawWriter is a connection that takes commands already encoded in RESP
// (Dialer's connections do): WriteRaw sends p in one write. Nothing may be
// waiting in redigo's buffer (no Send since the last Flush), and the
// replies are read with Receive as usual. A failed write closes the
// connection, so that the next command fails.
type RawWriter interface {
	WriteRaw(p []byte) error
}

// Cork corks c if it can be corked and returns it to uncork, or nil.
// Uncork must follow on every path once c has been flushed (commands sent
// and not uncorked never reach Redis).
func Cork(c redis.Conn) Corker {
	k, ok := c.(Corker)
	if !ok {
		return nil
	}
	k.Cork()
	return k
}

// corkKeep is the largest buffer an uncorked connection keeps for the
// next round.
const corkKeep = 64 << 10

// corkNetConn is the network connection under a corkable redis.Conn.
// Only the goroutine using the redis.Conn touches held, buf and rd.
//
// It also reads through a buffer of readBuffer bytes, made at the first
// read: redigo's own reader holds 4096 bytes and reads a larger reply
// (a job of a few KB) straight from the socket, one system call per reply,
// where a round of replies fits in one read here.
type corkNetConn struct {
	net.Conn
	held bool
	buf  []byte
	rd   *bufio.Reader
	// wrote and tls record the first write: a TLS connection's is its
	// handshake record (0x16, during the dial: redigo runs the handshake
	// there), a plain one's a RESP command ('*').
	wrote, tls bool
	// readTimeout is the connection's (redis.DialReadTimeout), for the
	// replies a ReplyReader reads; deadline records that StartReplies left
	// a read deadline set.
	readTimeout time.Duration
	deadline    bool
	// slab is where a ReplyReader carves bulk payloads from.
	slab []byte
}

// readBuffer is the size of a corkable connection's read buffer.
const readBuffer = 64 << 10

func (c *corkNetConn) Read(p []byte) (int, error) {
	if c.rd == nil {
		c.rd = bufio.NewReaderSize(c.Conn, readBuffer)
	}
	return c.rd.Read(p)
}

func (c *corkNetConn) Write(p []byte) (int, error) {
	if !c.wrote && len(p) > 0 {
		c.wrote, c.tls = true, p[0] == 0x16
	}
	if c.held {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *corkNetConn) uncork() error {
	c.held = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > corkKeep {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// fullConn is what redigo's own connections implement; corkConn keeps all
// of it, so redis.DoContext and redis.ReceiveWithTimeout still reach the
// connection's own methods.
type fullConn interface {
	redis.Conn
	redis.ConnWithTimeout
	redis.ConnWithContext
}

// corkConn is a redigo connection over a corkNetConn.
type corkConn struct {
	fullConn
	nc *corkNetConn
}

func (c *corkConn) Cork() { c.nc.held = true }

func (c *corkConn) Uncork() error {
	err := c.nc.uncork()
	if err != nil {
		// redigo did not see the write fail: close it, so that the next
		// command fails instead of waiting for a reply to nothing.
		c.fullConn.Close()
	}
	return err
}

func (c *corkConn) WriteRaw(p []byte) error {
	if c.nc.tls {
		return errRawTLS
	}
	if _, err := c.nc.Write(p); err != nil {
		c.fullConn.Close()
		return err
	}
	return nil
}

// errRawTLS is WriteRaw's refusal on a TLS connection, whose commands
// must go through the TLS layer above the corked one (see Raw).
var errRawTLS = errors.New("resp: encoded commands on a TLS connection")

// Raw returns c as a RawWriter when it takes encoded commands: a
// connection of DialCorkable that is not TLS.
func Raw(c redis.Conn) (RawWriter, bool) {
	k, ok := c.(*corkConn)
	if !ok || k.nc.tls {
		return nil, false
	}
	return k, true
}

// DialCorkable dials with dial (through redis.DialContextFunc, added to
// opts) and returns a connection that implements Corker when redigo's
// connection has the methods corkConn keeps (it has, in redigo 1.9).
// readTimeout is the one opts give redigo (0: none), for the replies read
// through ReplyReader.
func DialCorkable(ctx context.Context, readTimeout time.Duration, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	redigoDial func(ctx context.Context, opts ...redis.DialOption) (redis.Conn, error), opts ...redis.DialOption) (redis.Conn, error) {
	var nc *corkNetConn
	o := append(opts[:len(opts):len(opts)], redis.DialContextFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		nc = &corkNetConn{Conn: c, readTimeout: readTimeout}
		return nc, nil
	}))
	c, err := redigoDial(ctx, o...)
	if err != nil {
		return nil, err
	}
	fc, ok := c.(fullConn)
	if !ok || nc == nil {
		return c, nil
	}
	return &corkConn{fullConn: fc, nc: nc}, nil
}
