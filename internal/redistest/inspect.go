package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

// CommandCalls returns how many times cmd ran ("brpop", "client|unblock"),
// from INFO commandstats.
func CommandCalls(t testing.TB, c redis.Conn, cmd string) int {
	t.Helper()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// Clients returns the CLIENT LIST lines whose last command is cmd.
// clientCmd is the name CLIENT has on this server (it may be renamed).
func Clients(t testing.TB, c redis.Conn, clientCmd, cmd string) []string {
	t.Helper()
	out, err := redis.String(c.Do(clientCmd, "LIST"))
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " cmd="+cmd+" ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// BlockedIn returns how many clients are blocked in cmd.
func BlockedIn(t testing.TB, c redis.Conn, clientCmd, cmd string) int {
	t.Helper()
	n := 0
	for _, l := range Clients(t, c, clientCmd, cmd) {
		for _, f := range strings.Fields(l) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "b") {
				n++
			}
		}
	}
	return n
}

// Monitor reads MONITOR output from a test server. Commands are read up to
// a sentinel ECHO sent on another connection, so no sleep is needed to know
// that every earlier command has been seen.
type Monitor struct {
	conn redis.Conn
	s    *Server
	n    int
}

// StartMonitor starts MONITOR on a connection of its own.
func (s *Server) StartMonitor(t testing.TB) *Monitor {
	t.Helper()
	c, err := s.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ok, err := redis.String(c.Do("MONITOR"))
	require.NoError(t, err)
	require.Equal(t, "OK", ok)
	return &Monitor{conn: c, s: s}
}

// Lines returns the commands seen since the last call, each as the quoted
// argument list MONITOR prints (`"rpush" "queue:default" "..."`), leaving
// out the fetchers' BRPOP/BLMPOP polls and their CLIENT ID/UNBLOCK.
func (m *Monitor) Lines(t testing.TB) []string {
	t.Helper()
	return m.lines(t, false)
}

// ClientLines is Lines without the commands that Lua scripts ran: what
// clients sent.
func (m *Monitor) ClientLines(t testing.TB) []string {
	t.Helper()
	return m.lines(t, true)
}

func (m *Monitor) lines(t testing.TB, clientsOnly bool) []string {
	t.Helper()
	m.n++
	sentinel := fmt.Sprintf("monitor-sentinel-%d", m.n)
	c, err := m.s.Dial()
	require.NoError(t, err)
	_, err = c.Do("ECHO", sentinel)
	c.Close()
	require.NoError(t, err)
	var out []string
	for {
		line, err := redis.String(m.conn.Receive())
		require.NoError(t, err)
		i := strings.Index(line, `] "`)
		if i < 0 {
			continue
		}
		cmd := line[i+2:]
		if strings.Contains(cmd, sentinel) {
			return out
		}
		if clientsOnly && strings.Contains(line[:i], " lua") {
			continue
		}
		lc := strings.ToLower(cmd)
		if strings.HasPrefix(lc, `"brpop"`) || strings.HasPrefix(lc, `"blmpop"`) ||
			strings.HasPrefix(lc, `"client" "id"`) || strings.HasPrefix(lc, `"client" "unblock"`) {
			continue
		}
		out = append(out, cmd)
	}
}

// Names returns the lower-case command names of lines.
func Names(lines []string) []string {
	var out []string
	for _, l := range lines {
		name, _, _ := strings.Cut(l, " ")
		out = append(out, strings.ToLower(strings.Trim(name, `"`)))
	}
	return out
}

// InProgress returns the jobs in the reliable fetch's in-progress lists
// (working:queue:<queue>:<identity>) of the process identity and its list
// identities (identity followed by hex digits), or of every process for
// "".
func InProgress(t testing.TB, c redis.Conn, identity string) []string {
	t.Helper()
	var out []string
	lists, err := redis.Strings(c.Do("KEYS", "working:queue:*:"+identity+"*"))
	require.NoError(t, err)
	for _, k := range lists {
		vals, err := redis.Strings(c.Do("LRANGE", k, 0, -1))
		require.NoError(t, err)
		out = append(out, vals...)
	}
	return out
}
