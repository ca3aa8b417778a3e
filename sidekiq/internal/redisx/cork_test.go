package redisx

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

// countingConn counts the writes that reach the network connection and
// can be told to fail them.
type countingConn struct {
	net.Conn
	writes atomic.Int32
	bytes  atomic.Int64
	fail   atomic.Bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, errors.New("write: broken pipe")
	}
	c.writes.Add(1)
	c.bytes.Add(int64(len(p)))
	return c.Conn.Write(p)
}

// dialSink dials a listener that reads and discards everything, through a
// countingConn.
func dialSink(t *testing.T) (redis.Conn, *countingConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	var cc *countingConn
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc = &countingConn{Conn: c}
		return cc, nil
	}
	c, err := DialCorkable(context.Background(), dial, func(ctx context.Context, opts ...redis.DialOption) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", ln.Addr().String(), opts...)
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, cc
}

// sendRound sends 40 commands of over 300 bytes each (three times
// redigo's 4096-byte buffer) and flushes them.
func sendRound(t *testing.T, c redis.Conn) {
	t.Helper()
	payload := strings.Repeat("x", 300)
	for range 40 {
		require.NoError(t, c.Send("LREM", "queue:default", -1, payload))
	}
	require.NoError(t, c.Flush())
}

func TestCorkedRoundReachesTheSocketInOneWrite(t *testing.T) {
	c, cc := dialSink(t)
	k := Cork(c)
	require.NotNil(t, k, "Dialer-style connections are corkable")
	sendRound(t, c)
	require.Zero(t, cc.writes.Load(), "nothing is written while corked")
	require.NoError(t, k.Uncork())
	require.EqualValues(t, 1, cc.writes.Load())
	require.Greater(t, cc.bytes.Load(), int64(40*300))

	// Uncorked, the same round goes out in redigo's 4096-byte pieces.
	sendRound(t, c)
	require.GreaterOrEqual(t, cc.writes.Load(), int32(1+3))
}

func TestUncorkWhoseWriteFailsBreaksTheConnection(t *testing.T) {
	c, cc := dialSink(t)
	k := Cork(c)
	sendRound(t, c)
	cc.fail.Store(true)
	require.Error(t, k.Uncork())
	_, err := c.Do("PING")
	require.Error(t, err, "a connection whose round was lost must not be used again")
}

func TestCorkOfAPlainConnectionIsNil(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			io.Copy(io.Discard, c)
		}
	}()
	c, err := redis.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.Nil(t, Cork(c))
}
