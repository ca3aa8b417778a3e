package web

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/lease"
	"github.com/gojob/gojob/internal/numfmt"
	"github.com/gojob/gojob/sidekiq/api"
)

// A bulk action ("Retry all", "Kill all", "Add all to queue", "Delete
// all", each on a whole set or on a search's matches) runs in the
// background, in chunks, so no request waits for a million jobs. Its
// progress lives in Redis, in the hash gojob-web-bulk:<set>, so a reload,
// or another dashboard process on the same Redis, shows it; the key
// gojob-web-bulk-lock:<set> (a lease renewed while it runs) refuses a
// second bulk action on the same set meanwhile. A finished action's result
// stays for an hour.
const (
	bulkKeyPrefix  = "gojob-web-bulk:"
	bulkLockPrefix = "gojob-web-bulk-lock:"
	bulkLease      = 30 * time.Second
	bulkKeep       = time.Hour
	// bulkReport is how often the progress is written.
	bulkReport = 250 * time.Millisecond
)

// bulkStatus is the stored progress of a set's bulk action.
type bulkStatus struct {
	Action string `json:"action"`
	Label  string `json:"label"`
	Query  string `json:"query,omitempty"`
	// State is running, done, failed or interrupted (running, but the lease
	// ran out: the process running it stopped).
	State string `json:"state"`
	Total int64  `json:"total"`
	Done  int64  `json:"done"`
	Moved int64  `json:"moved"`
	// Gone counts entries that disappeared meanwhile (processed, moved or
	// deleted elsewhere); Left the ones left in place (unparsable).
	Gone int64 `json:"gone"`
	Left int64 `json:"left"`
	// Dropped counts the dead jobs the dead set's cap removed to make room
	// for the killed ones (Kill all).
	Dropped  int64     `json:"dropped"`
	Error    string    `json:"error,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
}

// Running reports whether the action still runs.
func (s *bulkStatus) Running() bool { return s.State == "running" }

// Percent is the share done, 0-100.
func (s *bulkStatus) Percent() int64 {
	if s.Total <= 0 {
		if s.State == "running" {
			return 0
		}
		return 100
	}
	return min(100, 100*s.Done/s.Total)
}

// Max is the progress bar's maximum: the total, or what was done when more
// arrived meanwhile.
func (s *bulkStatus) Max() int64 { return max(s.Total, s.Done, 1) }

// Summary is the result in a sentence.
func (s *bulkStatus) Summary() string {
	scope := ""
	if s.Query != "" {
		scope = fmt.Sprintf(" (jobs matching “%s”)", s.Query)
	}
	switch s.State {
	case "running":
		return fmt.Sprintf("%s%s: %s of %s done", s.Label, scope, numfmt.Int(s.Done), plural(int(s.Total), "job"))
	case "interrupted":
		return fmt.Sprintf("%s%s stopped after %s of %s: the dashboard process running it ended; press the button again for the rest",
			s.Label, scope, numfmt.Int(s.Done), plural(int(s.Total), "job"))
	}
	msg := fmt.Sprintf("%s%s finished: %s", s.Label, scope, plural(int(s.Moved), "job"))
	if s.Gone > 0 {
		msg += fmt.Sprintf(", %s no longer there", numfmt.Int(s.Gone))
	}
	if s.Left > 0 {
		msg += fmt.Sprintf(", %s left in place (unparsable)", numfmt.Int(s.Left))
	}
	if s.Dropped > 0 {
		msg += fmt.Sprintf("; the dead set's cap dropped %s, the oldest", plural(int(s.Dropped), "dead job"))
	}
	if s.Error != "" {
		msg = fmt.Sprintf("%s%s failed after %s: %s", s.Label, scope, plural(int(s.Moved), "job"), s.Error)
	}
	return msg
}

// bulkRunner starts and reports the bulk actions of a dashboard.
type bulkRunner struct{ h *handler }

func newBulkRunner(h *handler) *bulkRunner { return &bulkRunner{h: h} }

func bulkKey(k *setKind) string  { return bulkKeyPrefix + k.set(nil).Name() }
func bulkLock(k *setKind) string { return bulkLockPrefix + k.set(nil).Name() }

// status reads a set's bulk action, nil when there is none.
func (b *bulkRunner) status(ctx context.Context, k *setKind) (*bulkStatus, error) {
	conn, err := b.h.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	raw, err := redis.Bytes(redis.DoContext(conn, ctx, "HGET", bulkKey(k), "status"))
	if errors.Is(err, redis.ErrNil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st := &bulkStatus{}
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, nil // not ours to show
	}
	if st.State == "running" {
		// The status and the lease are read in one transaction: a run
		// writes its result and then releases its lease, and a status read
		// before the result with a lease looked at after the release would
		// say "interrupted" of an action that finished.
		conn.Send("MULTI")
		conn.Send("HGET", bulkKey(k), "status")
		conn.Send("EXISTS", bulkLock(k))
		vals, err := redis.Values(redis.DoContext(conn, ctx, "EXEC"))
		if err != nil {
			return nil, err
		}
		raw, _ := redis.Bytes(vals[0], nil)
		held, _ := redis.Int(vals[1], nil)
		st = &bulkStatus{}
		if err := json.Unmarshal(raw, st); err != nil {
			return nil, nil
		}
		if st.State == "running" && held == 0 {
			st.State = "interrupted"
		}
	}
	return st, nil
}

// save writes st: a finished action's result stays bulkKeep, a running
// one's a day past its last report (so a process that died leaves its
// "stopped after" for a while, not forever).
func (b *bulkRunner) save(ctx context.Context, k *setKind, st *bulkStatus) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	conn, err := b.h.cfg.Pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	keep := bulkKeep
	if st.State == "running" {
		keep = 24 * time.Hour
	}
	if _, err = redis.DoContext(conn, ctx, "HSET", bulkKey(k), "status", raw); err == nil {
		_, err = redis.DoContext(conn, ctx, "EXPIRE", bulkKey(k), int(keep.Seconds()))
	}
	return err
}

// errBulkRunning refuses a second bulk action on a set.
type errBulkRunning struct{ st *bulkStatus }

func (e *errBulkRunning) Error() string {
	if e.st == nil {
		return "another bulk action is running on this set: wait for it to finish (its progress shows on the page)"
	}
	return fmt.Sprintf("refused: %s is still running (%s of %s done, started %s ago); wait for it to finish",
		e.st.Label, numfmt.Int(e.st.Done), plural(int(e.st.Total), "job"), humanDuration(time.Since(e.st.Started)))
}

// start takes the set's lease and runs action in the background. q is the
// search ("" for the whole set).
func (b *bulkRunner) start(ctx context.Context, k *setKind, action, q string) error {
	run := rand.Text()
	conn, err := b.h.cfg.Pool.GetContext(ctx)
	if err != nil {
		return err
	}
	took, err := lease.Take(ctx, conn, bulkLock(k), run, bulkLease)
	conn.Close()
	if err != nil {
		return err
	}
	if !took {
		st, _ := b.status(ctx, k)
		return &errBulkRunning{st: st}
	}
	st := &bulkStatus{Action: action, Label: actionLabels[action], Query: q, State: "running", Started: b.h.clock.Now().UTC()}
	if err := b.save(ctx, k, st); err != nil {
		b.unlock(k, run)
		return err
	}
	go b.run(k, st, run)
	return nil
}

func (b *bulkRunner) unlock(k *setKind, run string) {
	conn := b.h.cfg.Pool.Get()
	defer conn.Close()
	lease.Release(context.Background(), conn, bulkLock(k), run)
}

// run does the work, writing the progress as it goes; the lease is
// renewed with each report, so a process that dies leaves an interrupted
// action, not a lock.
func (b *bulkRunner) run(k *setKind, st *bulkStatus, run string) {
	ctx := context.Background()
	log := b.h.cfg.Logger
	defer b.unlock(k, run)
	last := time.Now()
	report := func(force bool) error {
		if !force && time.Since(last) < bulkReport {
			return nil
		}
		last = time.Now()
		conn := b.h.cfg.Pool.Get()
		held, err := lease.Renew(ctx, conn, bulkLock(k), run, bulkLease)
		conn.Close()
		if err == nil && !held {
			return errors.New("the lease on the set was lost (another process took it over)")
		}
		return b.save(ctx, k, st)
	}
	err := b.work(ctx, k, st, report)
	st.Finished = b.h.clock.Now().UTC()
	st.State = "done"
	if err != nil {
		st.State = "failed"
		st.Error = problem(err)
		log.Error().Err(err).Str("component", "web").Str("action", st.Action).Str("set", k.Path).Msg("bulk action failed")
	}
	if err := b.save(ctx, k, st); err != nil {
		log.Error().Err(err).Str("component", "web").Str("set", k.Path).Msg("could not store a bulk action's result")
	}
}

// bulkActions are the api's actions of the bulk buttons.
var bulkActions = map[string]string{"retry_all": "retry", "add_all": "retry", "kill_all": "kill", "delete_all": "delete"}

// work applies the action to the set's entries, or the search's matches,
// present when it started (api.JobSet.Bulk), reporting as it goes.
func (b *bulkRunner) work(ctx context.Context, k *setKind, st *bulkStatus, report func(bool) error) error {
	var filter *api.Filter
	if st.Query != "" {
		filter = &api.Filter{Text: st.Query} // the same matches as the page (sets.go)
	}
	first := true
	_, err := k.set(b.h.api).Bulk(ctx, bulkActions[st.Action], filter, func(r *api.BulkActionResult) error {
		st.Total, st.Moved, st.Gone, st.Left, st.Dropped = r.Total, int64(r.Moved), int64(r.Gone), int64(r.Left), r.Dropped
		st.Done = st.Moved + st.Gone + st.Left
		force := first
		first = false
		return report(force)
	})
	return err
}

// bulkJSON is what the page's script polls for the progress bar.
func (h *handler) bulkJSON(k *setKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := h.bulk.status(r.Context(), k)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if st == nil {
			w.Write([]byte("null\n"))
			return
		}
		json.NewEncoder(w).Encode(struct {
			*bulkStatus
			Percent int64  `json:"percent"`
			Max     int64  `json:"max"`
			Summary string `json:"summary"`
		}{st, st.Percent(), st.Max(), st.Summary()})
	}
}
