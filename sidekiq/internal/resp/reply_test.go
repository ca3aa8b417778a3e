package resp

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// dialReplies dials addr as sidekiq.Dialer does and returns the
// connection with its ReplyReader.
func dialReplies(t *testing.T, addr string, readTimeout time.Duration) (redis.Conn, RawWriter, ReplyReader) {
	t.Helper()
	c, err := DialCorkable(context.Background(), readTimeout, (&net.Dialer{}).DialContext,
		func(ctx context.Context, opts ...redis.DialOption) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, append(opts, redis.DialReadTimeout(readTimeout))...)
		})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	rw, ok := Raw(c)
	require.True(t, ok)
	rr, ok := Replies(c)
	require.True(t, ok)
	return c, rw, rr
}

// Every kind of reply the fetch's commands get, read from a real Redis
// in the order sent, large payloads included; redigo then finds the
// connection as it left it.
func TestReplyReaderReadsARoundOfReplies(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	c, rw, rr := dialReplies(t, srv.Addr(), 0)
	big := strings.Repeat("b", 40<<10)  // past a slab: a piece of its own
	mid := strings.Repeat("m", 5000)    // a slab shared with the small ones
	huge := strings.Repeat("h", 70<<10) // past the read buffer too
	var cmds []byte
	for _, args := range [][]string{
		{"RPUSH", "q", "small", mid, big, huge},
		{"LMOVE", "q", "w", "LEFT", "LEFT"},
		{"LMOVE", "q", "w", "LEFT", "LEFT"},
		{"LMOVE", "q", "w", "LEFT", "LEFT"},
		{"LMOVE", "q", "w", "LEFT", "LEFT"},
		{"LMOVE", "q", "w", "LEFT", "LEFT"}, // empty now: nil
		{"SET", "s", "v"},
		{"LTRIM", "s", "0", "-2"}, // WRONGTYPE
		{"LREM", "w", "-1", "small"},
		{"SET", "s", ""},
		{"GET", "s"}, // an empty bulk
	} {
		a := make([]any, len(args))
		for i, s := range args {
			a[i] = s
		}
		cmds = appendTestCmd(cmds, a...)
	}
	require.NoError(t, rw.WriteRaw(cmds))
	require.NoError(t, rr.StartReplies())
	want := []Reply{
		{Kind: ReplyInt, Int: 4},
		{Kind: ReplyBulk, Bytes: []byte("small")},
		{Kind: ReplyBulk, Bytes: []byte(mid)},
		{Kind: ReplyBulk, Bytes: []byte(big)},
		{Kind: ReplyBulk, Bytes: []byte(huge)},
		{Kind: ReplyNil},
		{Kind: ReplyStatus, Text: "OK"},
		{Kind: ReplyError, Text: "WRONGTYPE Operation against a key holding the wrong kind of value"},
		{Kind: ReplyInt, Int: 1},
		{Kind: ReplyStatus, Text: "OK"},
		{Kind: ReplyBulk, Bytes: []byte{}},
	}
	got := make([]Reply, len(want))
	for i := range got {
		require.NoError(t, rr.ReadReply(&got[i]), "reply %d", i)
	}
	for i := range want {
		require.Equal(t, want[i].Kind, got[i].Kind, "reply %d", i)
		require.Equal(t, string(want[i].Bytes), string(got[i].Bytes), "reply %d", i)
		require.Equal(t, want[i].Int, got[i].Int, "reply %d", i)
		require.Equal(t, want[i].Text, got[i].Text, "reply %d", i)
	}
	require.Equal(t, redis.Error(want[7].Text), got[7].Err())
	require.NoError(t, got[1].Err())

	// Pieces of one slab are each the reply's own: appending to one does
	// not reach the next.
	small := append(got[1].Bytes, "XXXXXXXX"...)
	require.Equal(t, "smallXXXXXXXX", string(small))
	require.Equal(t, mid, string(got[2].Bytes))

	// Nothing is left unread for redigo.
	v, err := redis.String(c.Do("PING"))
	require.NoError(t, err)
	require.Equal(t, "PONG", v)
}

// A reply that is not RESP as these commands answer it breaks the
// connection: the next command fails instead of reading out of step.
func TestMalformedReplyClosesTheConnection(t *testing.T) {
	for name, reply := range map[string]string{
		"unknown type": "?what\r\n",
		"bad length":   "$x1\r\nabc\r\n",
		"no CRLF":      "$3\r\nabcde\r\n",
		"an array":     "*1\r\n$1\r\na\r\n",
		"bad integer":  ":12a\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			addr := fakeRedis(t, func(w *bufio.Writer) { w.WriteString(reply) })
			c, rw, rr := dialReplies(t, addr, 0)
			require.NoError(t, rw.WriteRaw(appendTestCmd(nil, "GET", "k")))
			require.NoError(t, rr.StartReplies())
			var r Reply
			require.Error(t, rr.ReadReply(&r))
			_, err := c.Do("PING")
			require.Error(t, err)
		})
	}
}

// A reply that does not come within the connection's read timeout is an
// error, as it is through redigo.
func TestReplyReaderKeepsTheReadTimeout(t *testing.T) {
	addr := fakeRedis(t, func(*bufio.Writer) {}) // never answers
	c, rw, rr := dialReplies(t, addr, 100*time.Millisecond)
	require.NoError(t, rw.WriteRaw(appendTestCmd(nil, "GET", "k")))
	require.NoError(t, rr.StartReplies())
	start := time.Now()
	var r Reply
	err := rr.ReadReply(&r)
	require.Error(t, err)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	require.Less(t, time.Since(start), 5*time.Second)
	_, err = c.Do("PING")
	require.Error(t, err)
}

// fakeRedis listens on a free port and, on every connection, answers
// each command it reads with answer.
func fakeRedis(t *testing.T, answer func(w *bufio.Writer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveEach(t, ln, func(c net.Conn) {
		rd, w := bufio.NewReader(c), bufio.NewWriter(c)
		for {
			// One RESP command: *N then N bulk strings.
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			var n int
			if _, err := fmt.Sscan(line[1:], &n); err != nil {
				return
			}
			for range 2 * n {
				if _, err := rd.ReadString('\n'); err != nil {
					return
				}
			}
			answer(w)
			w.Flush()
		}
	})
	return ln.Addr().String()
}

// appendTestCmd encodes a command as RESP: an array of bulk strings.
func appendTestCmd(buf []byte, args ...any) []byte {
	buf = fmt.Appendf(buf, "*%d\r\n", len(args))
	for _, a := range args {
		s := fmt.Sprint(a)
		buf = fmt.Appendf(buf, "$%d\r\n%s\r\n", len(s), s)
	}
	return buf
}
