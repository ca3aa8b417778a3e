package contract

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// ErrVersionUnreadable is what a server that would write a format the
// live Ruby processes cannot read (8.x over older ones) fails to start
// with, unless told to write it anyway (ServerConfig.ForceVersion,
// gojob work --force-version).
var ErrVersionUnreadable = errors.New("live Sidekiq processes cannot read the version gojob writes")

// Keys gojob keeps beside Sidekiq's for the version decision
// (docs/version-follow.md). The Web UI reads neither.
const (
	// KeyGojobProcesses is the sorted set of the identities of live gojob
	// processes, scored by the time of their last check: DecideFormat
	// leaves them out of the Ruby processes, so that gojob never follows
	// its own writes.
	KeyGojobProcesses = "gojob-processes"
	// KeyRecordedFormat holds the last format gojob decided from live Ruby
	// processes or from what Redis showed (JSON, see RecordedFormat), for
	// when no Ruby process is live.
	KeyRecordedFormat = "gojob-sidekiq-version"
	// KeyGojobMetricsKeys is the sorted set of the `j|` metrics keys gojob
	// processes wrote, scored by the time of the write: the evidence of
	// DecideFormat leaves them out, so that gojob never takes its own
	// metrics for Ruby's.
	KeyGojobMetricsKeys = "gojob-metrics-keys"
	// KeyGojobEntries is the sorted set of the jids of the retry and dead
	// entries gojob processes wrote, scored by the time of the write, the
	// newest GojobEntriesKept kept: the evidence of DecideFormat leaves
	// those entries out.
	KeyGojobEntries = "gojob-entries"
)

// GojobEntriesKept is how many jids KeyGojobEntries keeps: many more than
// the entries the evidence reads.
const GojobEntriesKept = 1000

// RecordedFormatTTL is how long a record made from live Ruby processes or
// from evidence holds a lone gojob after the last Ruby process of its
// version was seen (docs/version-follow.md#how-long-a-record-holds): longer
// than a deploy that restarts every Ruby process, short enough that the
// Web UI of a newer release soon shows what gojob writes.
const RecordedFormatTTL = time.Hour

// recordRefresh is how often a decision from live processes rewrites the
// record's time while the same processes stay.
const recordRefresh = time.Minute

// Where a Decision comes from.
const (
	// SourceLive: the oldest live Ruby process's version.
	SourceLive = "live"
	// SourceRecorded: no live Ruby process; the format gojob recorded
	// earlier.
	SourceRecorded = "recorded"
	// SourceEvidence: no live Ruby process and no record; what Ruby left in
	// Redis (metrics keys, work hashes, retry and dead entries).
	SourceEvidence = "evidence"
	// SourceNone: nothing shows the readers' version: FormatForAll.
	SourceNone = "none"
	// SourceAged: no live Ruby process and a record older than
	// RecordedFormatTTL: FormatForAll.
	SourceAged = "aged"
	// SourceManual marks a record set by hand: it never ages.
	SourceManual = "manual"
)

// Decision is the format to write and why.
type Decision struct {
	Format Format
	Source string
	// Ruby lists the live Ruby processes as "identity=version".
	Ruby []string
	// Oldest is the oldest live Ruby process's version (zero when none).
	Oldest wire.Version
	// Evidence says what Redis showed (SourceEvidence), or that it showed
	// nothing that decides (SourceNone).
	Evidence []string
	// Recorded is the record read from Redis, if any.
	Recorded *RecordedFormat
}

// Reason says in a sentence why the decision writes its format.
func (d Decision) Reason() string {
	switch d.Source {
	case SourceLive:
		return "writing the format of the oldest live Sidekiq process (" + d.Oldest.String() + ")"
	case SourceRecorded:
		return "no live Sidekiq process; writing the format recorded when one was last seen (" + d.Format.String() + ")"
	case SourceAged:
		return "no live Sidekiq process for " + RecordedFormatTTL.String() + " (the record of " + d.Recorded.Version +
			" has aged out): writing a format every Web UI from 6.4.1 to 8.x reads"
	case SourceEvidence:
		if d.Format.ForAll {
			return "no live Sidekiq process and no record; Redis shows Sidekiq versions of several families: writing a format every Web UI reads"
		}
		return "no live Sidekiq process and no record; Redis shows what Sidekiq " + d.Format.Version.String() + "'s family writes"
	}
	return "no live Sidekiq process, no record, nothing in Redis shows the version: writing a format every Web UI from 6.4.1 to 8.x reads"
}

// RecordedFormat is the value of KeyRecordedFormat.
type RecordedFormat struct {
	Version string  `json:"version"`
	ForAll  bool    `json:"for_all,omitempty"`
	Source  string  `json:"source"`
	At      float64 `json:"at"`
}

// Aged reports whether the record no longer holds at now: older than
// RecordedFormatTTL and not set by hand.
func (r *RecordedFormat) Aged(now time.Time) bool {
	return r.Source != SourceManual && now.Sub(FromEpochSeconds(r.At)) > RecordedFormatTTL
}

// Format returns the recorded format, or false when it does not parse.
func (r *RecordedFormat) Format() (Format, bool) {
	v, err := ParseVersion(r.Version)
	if err != nil {
		return Format{}, false
	}
	return Format{Version: v, ForAll: r.ForAll}, true
}

// LiveRuby reads the live Ruby processes (step 1 of DecideFormat) and the
// record, and decides from them alone: Source is SourceLive, or empty when
// no Ruby process is live.
func LiveRuby(ctx context.Context, pool *redis.Pool) (Decision, error) {
	d, _, err := liveRuby(ctx, pool)
	if err == nil && d.Oldest != (wire.Version{}) {
		d.Format, d.Source = Format{Version: d.Oldest}, SourceLive
	}
	return d, err
}

// liveRuby reads the live Ruby processes and the record; stale lists the
// Ruby ids in processes without an info.
func liveRuby(ctx context.Context, pool *redis.Pool) (d Decision, stale []string, err error) {
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return d, nil, fmt.Errorf("sidekiq: decide format: %w", err)
	}
	defer conn.Close()
	conn.Send("SMEMBERS", KeyProcesses)
	conn.Send("ZRANGE", KeyGojobProcesses, 0, -1)
	conn.Send("GET", KeyRecordedFormat)
	reply, err := redisreply.Pipeline(ctx, conn)
	if err != nil {
		return d, nil, fmt.Errorf("sidekiq: decide format: %w", err)
	}
	ids, _ := redis.Strings(reply[0], nil)
	gojob, _ := redis.Strings(reply[1], nil)
	if raw, err := redis.Bytes(reply[2], nil); err == nil {
		var r RecordedFormat
		if json.Unmarshal(raw, &r) == nil {
			d.Recorded = &r
		}
	}
	ruby := slices.DeleteFunc(ids, func(id string) bool { return slices.Contains(gojob, id) })
	slices.Sort(ruby)
	var infos []any
	if len(ruby) > 0 {
		for _, id := range ruby {
			conn.Send("HGET", id, "info")
		}
		if infos, err = redisreply.Pipeline(ctx, conn); err != nil {
			return d, nil, fmt.Errorf("sidekiq: decide format: %w", err)
		}
	}
	for i, id := range ruby {
		info, err := redis.Bytes(infos[i], nil)
		if err != nil {
			stale = append(stale, id) // no info: not live
			continue
		}
		pv := wire.Version6
		if m, err := rubyjson.ParseObject(info); err == nil {
			if v, ok := m.Get("version"); ok {
				if s, ok := v.Str(); ok {
					if p, err := ParseVersion(s); err == nil {
						pv = p
					}
				}
			}
		}
		d.Ruby = append(d.Ruby, id+"="+pv.String())
		if d.Oldest == (wire.Version{}) || !pv.AtLeast(d.Oldest.Major, d.Oldest.Minor, d.Oldest.Patch) {
			d.Oldest = pv
		}
	}
	return d, stale, nil
}

// DecideFormat chooses the format a process that follows the cluster
// writes (docs/version-follow.md):
//
//  1. the version of the oldest live Ruby process, so that every process
//     and the Web UI of that release read what gojob writes. Live means in
//     `processes` with an `info`; a process whose info has no `version`
//     is 6.x (the key appeared in 7.0.2). gojob processes (KeyGojobProcesses)
//     do not count.
//  2. with none live, the format gojob recorded when it last decided
//     (KeyRecordedFormat): the Ruby processes of a deploy that restarts
//     every one of them are gone but their Web UI is not. A record older
//     than RecordedFormatTTL (not set by hand) gives FormatForAll instead,
//     and what Ruby left is not read: it is older still.
//  3. with no record either, what Ruby left in Redis: `j|` metrics keys of
//     the last 8 hours (7.x or 8.x formats) but those gojob wrote
//     (KeyGojobMetricsKeys), the work hashes of processes
//     that just died (`:workers` up to 6.4.1, `:work` after), and the
//     newest retry and dead entries (millisecond timestamps: 8.x; strict
//     base64 backtraces: 7.2.1+; MIME base64: up to 7.2.0) but those
//     gojob wrote (KeyGojobEntries). Evidence of a
//     single family picks its reference version.
//  4. otherwise FormatForAll, which every Web UI from 6.4.1 to 8.x reads.
func DecideFormat(ctx context.Context, pool *redis.Pool, now time.Time) (Decision, error) {
	d, stale, err := liveRuby(ctx, pool)
	if err != nil {
		return d, err
	}
	switch {
	case d.Oldest != (wire.Version{}):
		d.Format, d.Source = Format{Version: d.Oldest}, SourceLive
		return d, nil
	case d.Recorded != nil:
		if f, ok := d.Recorded.Format(); ok {
			d.Format, d.Source = f, SourceRecorded
			if !f.ForAll && d.Recorded.Aged(now) {
				d.Format, d.Source = FormatForAll, SourceAged
			}
			return d, nil
		}
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return Decision{}, fmt.Errorf("sidekiq: decide format: %w", err)
	}
	defer conn.Close()
	ev, err := readEvidence(ctx, conn, now, stale)
	if err != nil {
		return Decision{}, fmt.Errorf("sidekiq: decide format: %w", err)
	}
	d.Evidence = ev.seen
	d.Format, d.Source = ev.decide()
	return d, nil
}

// RecordFormat writes d's format as KeyRecordedFormat when it is not what
// is recorded already (a recorded or aged-out format is never recorded
// again). A decision from live processes rewrites the record's time once a
// minute, so that its age is the time since a Ruby process of that version
// was last seen.
func RecordFormat(ctx context.Context, pool *redis.Pool, d Decision, now time.Time) error {
	if d.Source == SourceRecorded || d.Source == SourceAged {
		return nil
	}
	r := RecordedFormat{Version: d.Format.Version.String(), ForAll: d.Format.ForAll, Source: d.Source, At: EpochSeconds(now)}
	if old := d.Recorded; old != nil && old.Version == r.Version && old.ForAll == r.ForAll && old.Source == r.Source &&
		(r.Source != SourceLive || now.Sub(FromEpochSeconds(old.At)) < recordRefresh) {
		return nil
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("sidekiq: record format: %w", err)
	}
	defer conn.Close()
	if _, err := redis.DoContext(conn, ctx, "SET", KeyRecordedFormat, raw); err != nil {
		return fmt.Errorf("sidekiq: record format: %w", err)
	}
	return nil
}

// evidence is what Ruby left in Redis, by version family.
type evidence struct {
	v6, v7, v8 bool // up to 6.4.1 or MIME backtraces (≤7.2.0); 6.4.2+ work hashes, 7.x metrics, strict backtraces; 8.x
	seen       []string
}

func (e *evidence) decide() (Format, string) {
	switch {
	case e.v8 && !e.v7 && !e.v6:
		return Format{Version: wire.Version8}, SourceEvidence
	case e.v7 && !e.v6 && !e.v8:
		return Format{Version: wire.Version7}, SourceEvidence
	case e.v6 && !e.v7 && !e.v8:
		return Format{Version: wire.Version6}, SourceEvidence
	case e.v6 || e.v7 || e.v8:
		return FormatForAll, SourceEvidence // readers of several families
	}
	return FormatForAll, SourceNone
}

// evidenceWindow is how far back the metrics keys are looked for: their TTL.
const evidenceWindow = MetricsShortTTL * time.Second

// entriesLooked is how many of the newest retry and dead entries are read.
const entriesLooked = 20

// evidenceScript reads the evidence in one command (lua/evidence.lua).
//
//go:embed lua/evidence.lua
var evidenceLua string

var evidenceScript = redis.NewScript(0, evidenceLua)

// readEvidence reads what Ruby left in Redis with one script, whatever
// Redis holds: the minute buckets of the last 8 hours in both metrics
// formats but those gojob wrote, the stale processes' work hashes, and
// the newest retry and dead entries.
func readEvidence(ctx context.Context, conn redis.Conn, now time.Time, stale []string) (*evidence, error) {
	e := &evidence{}
	var k7s, k8s []any
	for m := time.Duration(0); m < evidenceWindow; m += time.Minute {
		at := now.Add(-m)
		k7, _ := MetricsKeys(wire.Version7, at)
		k8, _ := MetricsKeys(wire.Version8, at)
		k7s, k8s = append(k7s, k7[0]), append(k8s, k8[len(k8)-1])
	}
	args := []any{len(k7s), len(k8s), len(stale), entriesLooked}
	args = append(append(args, k7s...), k8s...)
	for _, id := range stale {
		args = append(args, id)
	}
	reply, err := redis.Values(evidenceScript.DoContext(ctx, conn, args...))
	if err != nil {
		return nil, err
	}
	if len(reply) != 6 {
		return nil, fmt.Errorf("evidence script: %d replies, want 6", len(reply))
	}
	minutes := int(evidenceWindow / time.Minute)
	for i, family := range []struct {
		flag *bool
		name string
	}{{&e.v7, "7.x"}, {&e.v8, "8.x"}} {
		if n, _ := redis.Int(reply[i], nil); n > 0 {
			*family.flag = true
			e.seen = append(e.seen, fmt.Sprintf("%s metrics keys in %d of the last %d minutes", family.name, n, minutes))
		}
	}
	hashes, _ := redis.Ints(reply[2], nil)
	for i, id := range stale {
		if i >= len(hashes) {
			break
		}
		if hashes[i]&1 != 0 {
			e.v6 = true
			e.seen = append(e.seen, "6.4.1 work hash "+id+":workers")
		}
		if hashes[i]&2 != 0 {
			e.v7 = true
			e.seen = append(e.seen, "6.4.2+ work hash "+id+":work")
		}
	}
	ownJIDs, _ := redis.Strings(reply[5], nil)
	for i, set := range []string{KeyRetry, KeyDead} {
		members, _ := redis.ByteSlices(reply[3+i], nil)
		for _, raw := range members {
			e.entry(set, raw, ownJIDs)
		}
	}
	return e, nil
}

// entry reads the version family off one retry or dead entry, unless a
// gojob wrote it (its jid is in own).
func (e *evidence) entry(set string, raw []byte, own []string) {
	j, err := wire.ParseJob(raw)
	if err != nil || slices.Contains(own, j.JID()) {
		return
	}
	for _, f := range []string{"failed_at", "enqueued_at", "created_at"} {
		if v, ok := j.Get(f); ok && v.Kind() == rubyjson.Integer {
			if !e.v8 {
				e.seen = append(e.seen, fmt.Sprintf("8.x millisecond %s in %s entry %s", f, set, j.JID()))
			}
			e.v8 = true
			return
		}
	}
	bt, ok := j.Get("error_backtrace")
	if !ok {
		return
	}
	s, ok := bt.Str()
	if !ok || s == "" {
		return
	}
	if strings.Contains(s, "\n") {
		if !e.v6 {
			e.seen = append(e.seen, "MIME base64 backtrace (up to 7.2.0) in "+set+" entry "+j.JID())
		}
		e.v6 = true
		return
	}
	if len(s) > 60 { // a MIME line is 60 characters: shorter proves nothing
		if !e.v7 {
			e.seen = append(e.seen, "strict base64 backtrace (7.2.1+) in "+set+" entry "+j.JID())
		}
		e.v7 = true
	}
}
