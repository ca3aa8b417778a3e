package sidekiq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// events records what the services and the handler did, in order.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, s)
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

type recordingService struct {
	name     string
	ev       *events
	startErr error
}

func (s *recordingService) Start(context.Context) error {
	s.ev.add("start " + s.name)
	return s.startErr
}

func (s *recordingService) Stop(context.Context) error {
	s.ev.add("stop " + s.name)
	return nil
}

// Services start in order before the first job and stop in reverse order
// after the last job has ended; a Loop's loop runs in between.
func TestServicesRunForTheServersLife(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1, Queues: []wire.QueueWeight{{Name: "default"}}})
	ev := &events{}
	running := make(chan struct{})
	b.srv.Handle("Job", HandlerFunc(func(ctx context.Context, _ *wire.Job) error {
		ev.add("job")
		close(running)
		<-Stopping(ctx)
		ev.add("job done")
		return nil
	}), nil)
	looped := make(chan struct{})
	b.srv.Serve(&recordingService{name: "a", ev: ev}, &recordingService{name: "b", ev: ev},
		Loop(func(ctx context.Context) {
			close(looped)
			<-ctx.Done()
			ev.add("loop ended")
		}))
	b.push(t, "default", `{"class":"Job","args":[],"jid":"j","queue":"default"}`)
	require.NoError(t, b.srv.Start(context.Background()))
	<-looped
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.srv.Stop(ctx))
	got := ev.list()
	require.Equal(t, []string{"start a", "start b"}, got[:2])
	require.Equal(t, []string{"job", "job done", "loop ended", "stop b", "stop a"}, got[2:])
}

// A service that fails to start fails the server's Start, and the
// services started before it are stopped.
func TestAServiceThatFailsFailsTheStart(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1})
	ev := &events{}
	b.srv.Serve(&recordingService{name: "a", ev: ev}, &recordingService{name: "b", ev: ev, startErr: errors.New("no database")})
	err := b.srv.Start(context.Background())
	require.ErrorContains(t, err, "no database")
	require.Equal(t, []string{"start a", "start b", "stop a"}, ev.list())
}

// Stopping is nil outside a job (never closed), and closed once the
// server running the job goes quiet.
func TestStoppingClosesAtQuiet(t *testing.T) {
	t.Parallel()
	require.Nil(t, Stopping(context.Background()))
	b := newTestServer(t, ServerConfig{Concurrency: 1, Queues: []wire.QueueWeight{{Name: "default"}}})
	stopping := make(chan (<-chan struct{}), 1)
	b.srv.Handle("Job", HandlerFunc(func(ctx context.Context, _ *wire.Job) error {
		stopping <- Stopping(ctx)
		<-Stopping(ctx)
		return Interrupt()
	}), nil)
	b.push(t, "default", `{"class":"Job","args":[],"jid":"j","queue":"default","retry":true}`)
	b.start(t)
	ch := <-stopping
	require.NotNil(t, ch)
	b.srv.Signal("TSTP")
	<-ch
	wait.For(t, "the interrupted job back in its queue", func() bool {
		n, _ := redis.Int(b.conn.Do("LLEN", "queue:default"))
		return n == 1
	})
	n, _ := redis.Int(b.conn.Do("ZCARD", "retry"))
	require.Zero(t, n, "an interrupt is not retried")
}
