package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Sentinels is a Redis Sentinel deployment owned by one test: a master,
// its replicas and the sentinels that monitor it (redis-server --sentinel),
// all on free 127.0.0.1 ports, stopped when the test ends.
type Sentinels struct {
	Name     string
	Master   *Server
	Replicas []*Server
	// Addrs are the sentinels' host:port.
	Addrs []string
}

// SentinelOptions tune StartSentinels.
type SentinelOptions struct {
	// Replicas (default 1) and Sentinels (default 3, quorum a majority).
	Replicas, Sentinels int
	// DownAfter is how long the master must not answer before the
	// sentinels see it down (default 1 s).
	DownAfter time.Duration
	// Args are extra redis-server arguments for the master and replicas.
	Args []string
}

// StartSentinels starts a master, its replicas and the sentinels, and
// returns once the sentinels know every replica (a failover can then
// promote one).
func StartSentinels(t testing.TB, o SentinelOptions) *Sentinels {
	t.Helper()
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	if o.DownAfter == 0 {
		o.DownAfter = time.Second
	}
	s := &Sentinels{Name: "gojobmaster"}
	s.Master = StartWith(t, Options{TCP: true, Args: o.Args})
	for range o.Replicas {
		args := append([]string{"--replicaof", "127.0.0.1", fmt.Sprint(s.Master.Port)}, o.Args...)
		s.Replicas = append(s.Replicas, StartWith(t, Options{TCP: true, Args: args}))
	}
	// A replica still in its first sync is not counted by WAIT, and a
	// sentinel would not promote it: the deployment is ready when every
	// replica's link to the master is up.
	for _, r := range s.Replicas {
		s.waitSentinel(t, fmt.Sprintf("127.0.0.1:%d", r.Port), func(c redis.Conn) bool {
			info, err := redis.String(c.Do("INFO", "replication"))
			return err == nil && strings.Contains(info, "master_link_status:up")
		}, "the replica to sync with its master")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server is not installed (make test installs it): %v", err)
	}
	quorum := o.Sentinels/2 + 1
	for range o.Sentinels {
		dir := t.TempDir()
		port := freePort(t)
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d %d\n"+
			"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\n",
			port, dir, s.Name, s.Master.Port, quorum, s.Name, o.DownAfter.Milliseconds(), s.Name, s.Name)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, conf, "--sentinel", "--loglevel", "warning")
		if err := cmd.Start(); err != nil {
			t.Fatalf("redistest: start sentinel: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		s.Addrs = append(s.Addrs, addr)
		s.waitSentinel(t, addr, func(c redis.Conn) bool {
			_, err := c.Do("PING")
			return err == nil
		}, "the sentinel to start")
	}
	for _, a := range s.Addrs {
		s.waitSentinel(t, a, func(c redis.Conn) bool {
			reps, err := redis.Values(c.Do("SENTINEL", "replicas", s.Name))
			return err == nil && len(reps) == o.Replicas
		}, "the sentinel to know the replicas")
	}
	return s
}

// URL is the deployment's redis+sentinel URL.
func (s *Sentinels) URL() string {
	return "redis+sentinel://" + strings.Join(s.Addrs, ",") + "/" + s.Name
}

// MasterAddr is the master's address as the first sentinel reports it.
func (s *Sentinels) MasterAddr(t testing.TB) string {
	t.Helper()
	c, err := redis.Dial("tcp", s.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := redis.Strings(c.Do("SENTINEL", "get-master-addr-by-name", s.Name))
	if err != nil {
		t.Fatal(err)
	}
	return v[0] + ":" + v[1]
}

func (s *Sentinels) waitSentinel(t testing.TB, addr string, ok func(redis.Conn) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := redis.Dial("tcp", addr); err == nil {
			done := ok(c)
			c.Close()
			if done {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redistest: timed out waiting for %s (%s)", what, addr)
}
