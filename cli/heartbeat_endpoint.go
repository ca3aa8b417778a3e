package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/redact"
	"github.com/gojob/gojob/sidekiq"
)

// heartbeatEndpoint receives the heartbeats of --http handlers
// (docs/heartbeats.md). Each job's request carries its own URL,
// <base>/heartbeat/<token> with an unguessable token, in
// X-Gojob-Heartbeat-Url; a POST there is a heartbeat of that job. The
// answers: 204 recorded; 410 Gone when the job was cancelled (its deadline
// passed, or gojob is stopping), with the reason in the body, so the
// handler can stop; 404 when no job of this process has that token (it has
// finished).
type heartbeatEndpoint struct {
	base string
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	mu   sync.Mutex
	jobs map[string]context.Context
}

// newHeartbeatEndpoint listens on addr (host:port; port 0 picks a free one)
// and serves heartbeats until Close. publicURL, when set, is the base URL
// handed to the handlers (for handlers on other hosts, or behind a proxy);
// otherwise http://<the listening address>.
func newHeartbeatEndpoint(addr, publicURL string, log zerolog.Logger) (*heartbeatEndpoint, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("heartbeat endpoint: %w", err)
	}
	base := strings.TrimRight(publicURL, "/")
	if base == "" {
		base = "http://" + ln.Addr().String()
	}
	e := &heartbeatEndpoint{base: base, ln: ln, done: make(chan struct{}), jobs: map[string]context.Context{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /heartbeat/{token}", e.serveBeat)
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(e.done)
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("component", "heartbeat").Msg("heartbeat endpoint stopped")
		}
	}()
	log.Info().Str("component", "heartbeat").Str("url", redact.URL(base)).Msg("--http handlers heartbeat at " + redact.URL(base) + "/heartbeat/<token>")
	return e, nil
}

// URL returns the base URL handed to handlers.
func (e *heartbeatEndpoint) URL() string { return e.base }

// Close stops serving.
func (e *heartbeatEndpoint) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.srv.Shutdown(ctx)
	<-e.done
	return err
}

// register gives the job running with ctx a heartbeat URL, valid until done
// is called.
func (e *heartbeatEndpoint) register(ctx context.Context) (url string, done func()) {
	var b [16]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	e.mu.Lock()
	e.jobs[token] = ctx
	e.mu.Unlock()
	return e.base + "/heartbeat/" + token, func() {
		e.mu.Lock()
		delete(e.jobs, token)
		e.mu.Unlock()
	}
}

func (e *heartbeatEndpoint) serveBeat(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	ctx, ok := e.jobs[r.PathValue("token")]
	e.mu.Unlock()
	if !ok {
		http.Error(w, "no running job has this heartbeat URL (it has finished)", http.StatusNotFound)
		return
	}
	if err := sidekiq.Heartbeat(ctx); err != nil {
		http.Error(w, "the job was cancelled: "+err.Error(), http.StatusGone)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
