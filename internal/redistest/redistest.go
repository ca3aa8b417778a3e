// Package redistest starts throwaway redis-server processes for tests. Each
// server listens on a unix socket in the test's temporary directory, keeps
// nothing on disk and is stopped when the test ends, so tests may FLUSHALL it.
// The shared Redis on 127.0.0.1:6379 is never touched.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
)

// Server is a running redis-server owned by one test.
type Server struct {
	// Socket is the unix socket path.
	Socket string
	// Port is the TCP port on 127.0.0.1, or 0 when the server has none.
	Port int
	cmd  *exec.Cmd
}

// URL returns a redis URL for the server (the TCP port when it has one,
// otherwise the unix socket).
func (s *Server) URL() string {
	if s.Port != 0 {
		return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port)
	}
	return "unix://" + s.Socket
}

// Addr returns host:port (TCP servers only).
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

// Dial opens one connection.
func (s *Server) Dial() (redis.Conn, error) {
	if s.Port != 0 {
		return redis.Dial("tcp", s.Addr())
	}
	return redis.Dial("unix", s.Socket)
}

// Pool returns a connection pool to the server, closed at the end of the test.
func (s *Server) Pool(t testing.TB) *redis.Pool {
	p := &redis.Pool{MaxIdle: 32, Dial: s.Dial, IdleTimeout: time.Minute}
	t.Cleanup(func() { p.Close() })
	return p
}

// Options tune Start.
type Options struct {
	// TCP makes the server also listen on a free 127.0.0.1 port (Ruby and
	// other processes in compat tests connect over TCP).
	TCP bool
	// Args are extra redis-server arguments ("--rename-command", "CLIENT", "").
	Args []string
}

// Start starts a redis-server for t. It fails the test when redis-server is
// not installed: `make test` installs it.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith starts a redis-server with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server is not installed (make test installs it): %v", err)
	}
	dir, err := os.MkdirTemp("", "gojob-redis-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Socket: filepath.Join(dir, "redis.sock")}
	port := 0
	if o.TCP {
		port = freePort(t)
		s.Port = port
	}
	args := []string{
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--unixsocket", s.Socket, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning",
	}
	args = append(args, o.Args...)
	s.cmd = exec.Command(bin, args...)
	out, _ := s.cmd.StdoutPipe()
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redistest: start redis-server: %v", err)
	}
	var logLines []string
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if len(logLines) < 50 {
				logLines = append(logLines, sc.Text())
			}
		}
		close(done)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		<-done
		os.RemoveAll(dir)
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.Dial()
		if err == nil {
			_, err = c.Do("PING")
			c.Close()
			if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
				return s // answering (a server with requirepass refuses PING)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: redis-server did not start: %v\n%s", err, strings.Join(logLines, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart kills the server and starts it again on the same socket and
// port, with empty data unless its arguments make it persist (for outage
// tests), and returns once it answers commands.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.cmd.Process.Kill()
	s.cmd.Wait()
	c := exec.Command(s.cmd.Path, s.cmd.Args[1:]...)
	if err := c.Start(); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
	s.cmd = c
	for i := 0; i < 500; i++ {
		if conn, err := s.Dial(); err == nil {
			_, err = conn.Do("PING") // LOADING until its data is read
			conn.Close()
			if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("redistest: redis-server did not restart")
}

// Pause stops the server process (SIGSTOP): it keeps its connections and
// answers nothing until Resume, as a stalled Redis does.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// Kill stops the server (for outage tests); Restart brings it back.
func (s *Server) Kill() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Mini starts an in-process miniredis for fast unit tests and returns it with
// a pool. Anything that claims compatibility must use Start instead.
func Mini(t testing.TB) (*miniredis.Miniredis, *redis.Pool) {
	m := miniredis.RunT(t)
	p := &redis.Pool{MaxIdle: 8, Dial: func() (redis.Conn, error) { return redis.Dial("tcp", m.Addr()) }}
	t.Cleanup(func() { p.Close() })
	return m, p
}
