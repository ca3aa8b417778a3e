package sentinel

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dialerFor(addrs []string, master string) *Dialer {
	nd := &net.Dialer{Timeout: time.Second}
	return New(Config{Addrs: addrs, Master: master, NetDial: nd.DialContext,
		Dial: func(ctx context.Context, addr string, netDial func(ctx context.Context, network, addr string) (net.Conn, error),
			opts ...redis.DialOption) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, append(opts, redis.DialContextFunc(netDial))...)
		}})
}

// The dialer reaches the master the sentinels name, skipping a sentinel
// that does not answer; after the master dies and the sentinels promote
// the replica, a connection blocked on the old master fails at once and
// the next dial reaches the new one.
func TestDialerFollowsAFailover(t *testing.T) {
	s := redistest.StartSentinels(t, redistest.SentinelOptions{})
	d := dialerFor(append([]string{"127.0.0.1:1"}, s.Addrs...), s.Name)
	defer d.Close()
	ctx := context.Background()
	c, err := d.Dial(ctx)
	require.NoError(t, err)
	_, err = c.Do("SET", "k", "v")
	require.NoError(t, err)
	require.Equal(t, s.Addrs[0], d.addrs[0], "the sentinel that answered comes first")

	blocked := make(chan error, 1)
	go func() {
		_, err := c.Do("BLPOP", "nothing", 0)
		blocked <- err
	}()
	time.Sleep(100 * time.Millisecond)
	s.Master.Kill()
	wait.Within(t, 30*time.Second, "the sentinels to promote the replica", func() bool {
		return s.MasterAddr(t) == s.Replicas[0].Addr()
	})
	select {
	case err := <-blocked:
		require.Error(t, err, "the command blocked on the old master fails")
	case <-time.After(7 * time.Second):
		t.Fatal("a command blocked on the old master still waits after the switch")
	}
	c.Close()
	wait.Within(t, 10*time.Second, "a dial to reach the new master", func() bool {
		c, err := d.Dial(ctx)
		if err != nil {
			return false
		}
		defer c.Close()
		role, err := roleOf(ctx, c)
		return err == nil && role == "master"
	})
}

// Bad addresses say what is wrong: no sentinel answering, or a master
// name the sentinels do not monitor, named.
func TestDialerErrorsNameTheProblem(t *testing.T) {
	ctx := context.Background()
	_, err := dialerFor([]string{"127.0.0.1:1", "127.0.0.1:2"}, "mymaster").Dial(ctx)
	var se *Error
	require.ErrorAs(t, err, &se)
	require.False(t, se.Unknown)
	require.ErrorContains(t, err, "no sentinel at 127.0.0.1:1,127.0.0.1:2 answered")
	var ne net.Error
	require.True(t, errors.As(err, &ne), "an unreachable sentinel is a connection error")

	s := redistest.StartSentinels(t, redistest.SentinelOptions{Sentinels: 1})
	_, err = dialerFor(s.Addrs, "nosuchmaster").Dial(ctx)
	require.ErrorAs(t, err, &se)
	require.True(t, se.Unknown)
	require.ErrorContains(t, err, `monitor no master named "nosuchmaster"`)
}

// A failover that leaves the old master running, as a replica (SENTINEL
// FAILOVER, a healed partition): its idle connections, which would still
// answer reads and refuse writes, are closed on +switch-master.
func TestDialerClosesConnectionsToADemotedMaster(t *testing.T) {
	s := redistest.StartSentinels(t, redistest.SentinelOptions{})
	d := dialerFor(s.Addrs, s.Name)
	defer d.Close()
	c, err := d.Dial(context.Background())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Do("SET", "k", "v")
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // the watcher subscribes
	sc, err := redis.Dial("tcp", s.Addrs[0])
	require.NoError(t, err)
	defer sc.Close()
	_, err = sc.Do("SENTINEL", "FAILOVER", s.Name)
	require.NoError(t, err)
	wait.Within(t, 30*time.Second, "the switch", func() bool { return s.MasterAddr(t) == s.Replicas[0].Addr() })
	wait.Within(t, 7*time.Second, "the connection to the old master to be closed", func() bool {
		_, err := c.Do("GET", "k")
		return err != nil
	})
	_, err = c.Do("GET", "k")
	require.NotContains(t, err.Error(), "READONLY")
}
