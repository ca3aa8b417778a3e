package resp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
func dialSink(t testing.TB) (redis.Conn, *countingConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveEach(t, ln, discard)
	var cc *countingConn
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc = &countingConn{Conn: c}
		return cc, nil
	}
	c, err := DialCorkable(context.Background(), 0, dial, func(ctx context.Context, opts ...redis.DialOption) (redis.Conn, error) {
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

// Encoded commands go to a plain connection in one write; a TLS
// connection refuses them (they would bypass the TLS layer).
func TestRawWritesOnPlainConnectionsOnly(t *testing.T) {
	c, cc := dialSink(t)
	rw, ok := Raw(c)
	require.True(t, ok)
	require.NoError(t, rw.WriteRaw([]byte("*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n")))
	require.EqualValues(t, 1, cc.writes.Load())

	cert := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	require.NoError(t, err)
	serveEach(t, ln, discard)
	tc, err := DialCorkable(context.Background(), 0, (&net.Dialer{}).DialContext, func(ctx context.Context, opts ...redis.DialOption) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", ln.Addr().String(), append(opts, redis.DialUseTLS(true), redis.DialTLSSkipVerify(true))...)
	})
	require.NoError(t, err)
	t.Cleanup(func() { tc.Close() })
	_, ok = Raw(tc)
	require.False(t, ok, "a TLS connection takes no encoded commands")
	_, ok = Replies(tc)
	require.False(t, ok, "nor are its replies read past the TLS layer")
	require.Error(t, tc.(RawWriter).WriteRaw([]byte("*1\r\n$4\r\nPING\r\n")))
}

// serveEach serves every connection ln accepts with handle, on a goroutine
// of its own, and closes the connection after; ln closes at the end of
// the test.
func serveEach(t testing.TB, ln net.Listener, handle func(c net.Conn)) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// discard reads and drops what a connection sends.
func discard(c net.Conn) { io.Copy(io.Discard, c) }

// selfSigned makes a throwaway certificate for 127.0.0.1.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
