package maintenance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/sidekiq/wire"
)

type followBundle struct {
	conn   redis.Conn
	pool   *redis.Pool
	clk    *clocktest.Fake
	logs   *testlog.Buffer
	format *contract.LiveFormat
	f      *VersionFollower
}

func newFollowBundle(t *testing.T, follow bool, fixed wire.Version) *followBundle {
	t.Helper()
	pool := redistest.Start(t).Pool(t)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	b := &followBundle{conn: conn, pool: pool, clk: clocktest.NewFake(time.Unix(1795443862, 0)), logs: testlog.New(t)}
	b.format = contract.FixedFormat(fixed)
	f, err := NewVersionFollower(&VersionFollowerConfig{Pool: pool, Identity: "go:1:aaaaaaaaaaaa", Format: b.format,
		Follow: follow, Clock: b.clk, Logger: b.logs.Logger()})
	require.NoError(t, err)
	b.f = f
	return b
}

func (b *followBundle) ruby(t *testing.T, id, version string) {
	t.Helper()
	info := `{"hostname":"r","identity":"` + id + `"`
	if version != "" {
		info += `,"version":"` + version + `"`
	}
	_, err := b.conn.Do("SADD", contract.KeyProcesses, id)
	require.NoError(t, err)
	_, err = b.conn.Do("HSET", id, "info", info+"}")
	require.NoError(t, err)
}

func (b *followBundle) gone(t *testing.T, id string) {
	t.Helper()
	_, err := b.conn.Do("DEL", id)
	require.NoError(t, err)
}

func (b *followBundle) check(t *testing.T) contract.Decision {
	t.Helper()
	d, err := b.f.Check(context.Background())
	require.NoError(t, err)
	return d
}

// A following process writes for all readers while nothing shows their
// version, switches at the next check when a Ruby process joins (to the
// oldest), logs each switch once, and keeps the last version it saw live
// when the Ruby processes are gone.
func TestVersionFollowerSwitchesWithTheCluster(t *testing.T) {
	t.Parallel()
	b := newFollowBundle(t, true, wire.Version6)
	require.Equal(t, contract.SourceNone, b.check(t).Source)
	require.Equal(t, contract.FormatForAll, b.format.Format())
	require.Equal(t, 1, b.logs.Count("info", "every Web UI"))

	b.ruby(t, "r:7:bbbbbbbbbbbb", "7.3.10")
	b.check(t)
	require.Equal(t, contract.Format{Version: wire.Version7}, b.format.Format())
	b.check(t)
	require.Equal(t, 1, b.logs.Count("warn", "switching the wire format"), "logged once")

	b.ruby(t, "r:6:cccccccccccc", "")
	b.check(t)
	require.Equal(t, contract.Format{Version: wire.Version6}, b.format.Format(), "the oldest wins")
	b.gone(t, "r:6:cccccccccccc")
	b.check(t)
	require.Equal(t, contract.Format{Version: wire.Version7}, b.format.Format())
	require.Equal(t, 3, b.logs.Count("warn", "switching the wire format"))

	b.gone(t, "r:7:bbbbbbbbbbbb")
	d := b.check(t)
	require.Equal(t, contract.SourceRecorded, d.Source)
	require.Equal(t, contract.Format{Version: wire.Version7}, b.format.Format(), "the migration's end state keeps 7.x")
	require.Equal(t, 3, b.logs.Count("warn", "switching the wire format"))
}

// A 6.4.1 process seen once holds a lone gojob in 6.4.1's format only for
// contract.RecordedFormatTTL after it was last seen: then the lone gojob
// writes for all readers (7.x Web UIs show its version and its running
// jobs, every UI its metrics), logs the switch once, and keeps the record
// of when 6.4.1 was last seen. While the 6.4.1 process lives, the record's
// time follows it.
func TestVersionFollowerRecordAgesOut(t *testing.T) {
	t.Parallel()
	b := newFollowBundle(t, true, wire.Version7)
	b.ruby(t, "r:6:cccccccccccc", "")
	b.check(t)
	require.Equal(t, contract.Format{Version: wire.Version6}, b.format.Format())
	b.clk.Advance(30 * time.Minute) // still live half an hour later
	b.check(t)
	lastSeen := b.clk.Now()
	b.gone(t, "r:6:cccccccccccc")

	b.clk.Advance(contract.RecordedFormatTTL - time.Second)
	d := b.check(t)
	require.Equal(t, contract.SourceRecorded, d.Source)
	require.Equal(t, contract.Format{Version: wire.Version6}, b.format.Format(), "a restart's gap keeps 6.4.1")

	b.clk.Advance(2 * time.Second)
	d = b.check(t)
	require.Equal(t, contract.SourceAged, d.Source)
	require.Equal(t, contract.FormatForAll, b.format.Format())
	require.Equal(t, 1, b.logs.Count("warn", "has aged out"))
	b.check(t)
	require.Equal(t, 1, b.logs.Count("warn", "has aged out"), "logged once")
	raw, err := redis.Bytes(b.conn.Do("GET", contract.KeyRecordedFormat))
	require.NoError(t, err)
	require.JSONEq(t, `{"version":"6.4.1","source":"live","at":`+contract.Score(lastSeen)+`}`, string(raw),
		"the record keeps when 6.4.1 was last seen")

	// A Ruby process coming back is followed again.
	b.ruby(t, "r:6:cccccccccccc", "")
	b.check(t)
	require.Equal(t, contract.Format{Version: wire.Version6}, b.format.Format())
}

// gojob processes, this one included, never count as Ruby processes; the
// mark of one that stopped checking more than a minute ago goes.
func TestVersionFollowerIgnoresGojobProcesses(t *testing.T) {
	t.Parallel()
	b := newFollowBundle(t, true, wire.Version6)
	b.ruby(t, "go:1:aaaaaaaaaaaa", "7.3.10") // this process, in 7.x format
	b.ruby(t, "go:2:dddddddddddd", "8.1.7")  // another gojob
	_, err := b.conn.Do("ZADD", contract.KeyGojobProcesses, contract.Score(b.clk.Now().Add(-10*time.Second)), "go:2:dddddddddddd")
	require.NoError(t, err)
	_, err = b.conn.Do("ZADD", contract.KeyGojobProcesses, contract.Score(b.clk.Now().Add(-2*time.Minute)), "go:3:eeeeeeeeeeee")
	require.NoError(t, err)
	d := b.check(t)
	require.Empty(t, d.Ruby)
	require.Equal(t, contract.FormatForAll, b.format.Format())
	marks, err := redis.Strings(b.conn.Do("ZRANGE", contract.KeyGojobProcesses, 0, -1))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"go:1:aaaaaaaaaaaa", "go:2:dddddddddddd"}, marks)
	require.NoError(t, b.f.Unregister(context.Background()))
	marks, _ = redis.Strings(b.conn.Do("ZRANGE", contract.KeyGojobProcesses, 0, -1))
	require.Equal(t, []string{"go:2:dddddddddddd"}, marks)
}

// A fixed format is never switched. Over older live readers it is warned
// about at the first check and when they change; 8.x over 7.x or 6.x
// readers is an ErrVersionUnreadable (a caller refuses to start).
func TestVersionFollowerWarnsAboutAFixedFormatOlderReadersCannotRead(t *testing.T) {
	t.Parallel()
	b := newFollowBundle(t, false, wire.Version7)
	b.check(t)
	b.ruby(t, "r:6:cccccccccccc", "")
	b.check(t)
	b.check(t)
	require.Equal(t, 1, b.logs.Count("warn", "older than the 7.3.10 gojob writes"))
	require.Equal(t, contract.Format{Version: wire.Version7}, b.format.Format())
	rec, err := redis.String(b.conn.Do("GET", contract.KeyRecordedFormat))
	require.NoError(t, err)
	require.Contains(t, rec, `"version":"6.4.1"`, "live sightings are recorded")

	b8 := newFollowBundle(t, false, wire.Version8)
	b8.ruby(t, "r:7:bbbbbbbbbbbb", "7.3.10")
	_, err = b8.f.Check(context.Background())
	require.True(t, errors.Is(err, ErrVersionUnreadable), "%v", err)
	require.ErrorContains(t, err, "r:7:bbbbbbbbbbbb=7.3.10")
	_, err = b8.f.Check(context.Background())
	require.NoError(t, err, "told once while nothing changes")
	require.Equal(t, contract.Format{Version: wire.Version8}, b8.format.Format())
}
