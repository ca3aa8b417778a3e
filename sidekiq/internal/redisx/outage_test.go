package redisx

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// The outage log lines carry their durations with a unit.
func TestOutageLogWritesDurationsWithUnits(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	o := &OutageLog{Log: ptr(zerolog.New(&buf))}
	o.Stalled(4304099174 * time.Nanosecond)
	o.OK()
	o.Failed(errors.New("connection refused"))
	var lines []map[string]any
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 3, buf.String())
	require.Equal(t, "4.304s", lines[0]["no_reply_for"])
	require.Regexp(t, `^[0-9.]+(s|ms|µs|ns)$|^[0-9]+m[0-9.]+s$`, lines[1]["outage"])
}

func TestLogDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		4304099174 * time.Nanosecond: "4.304s",
		250 * time.Millisecond:       "250ms",
		123 * time.Second:            "2m3s",
		1500 * time.Microsecond:      "2ms",
		300 * time.Microsecond:       "300µs",
	} {
		require.Equal(t, want, LogDuration(d))
	}
}

// No log line of gojob writes a duration with zerolog's Dur, a number of
// milliseconds that does not say so ("outage=4304.099174"): durations go
// through LogDuration.
func TestNoLogWritesAUnitlessDuration(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	// A call may start a line of its own (a chain broken after a dot).
	dur := regexp.MustCompile(`(^|\.|\s)(Dur|Durs)\(`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if dur.MatchString(line) {
				t.Errorf("%s:%d logs a duration without a unit (use redisx.LogDuration): %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	require.NoError(t, err)
}

func ptr[T any](v T) *T { return &v }

// Every failure counts as an error; an outage counts once, from its first
// failure or stall to the success that ends it.
func TestOutageLogCountsErrorsAndOutages(t *testing.T) {
	var o OutageLog
	o.Failed(errors.New("refused"))
	o.Failed(errors.New("refused"))
	require.True(t, o.Down())
	o.OK()
	o.OK()
	o.Stalled(time.Second)
	o.Failed(errors.New("reset"))
	o.OK()
	errs, outages := o.Counts()
	require.Equal(t, int64(3), errs)
	require.Equal(t, int64(2), outages)
	require.False(t, o.Down())
}

// A stall report about a command that was already waiting when the outage
// ended belongs to that outage: it is not logged as a new one. A command
// that has waited the whole time since the recovery is a new stall.
func TestStallReportOfACommandFromBeforeTheRecoveryIsNotANewOutage(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	o := &OutageLog{Log: ptr(zerolog.New(&buf))}
	o.Stalled(12 * time.Second)
	o.OK()
	o.Stalled(12 * time.Second) // waiting since before the OK
	require.False(t, o.Down())
	require.Equal(t, 1, strings.Count(buf.String(), "redis is not answering"), buf.String())
	_, outages := o.Counts()
	require.Equal(t, int64(1), outages)

	time.Sleep(20 * time.Millisecond)
	o.Stalled(10 * time.Millisecond) // sent after the OK, unanswered since
	require.True(t, o.Down())
	require.Equal(t, 2, strings.Count(buf.String(), "redis is not answering"), buf.String())
}

// The success of a command sent before an outage that a failure began is
// a reply that was already on its way (a killed server's last one, read
// from a buffer): it does not end the outage, which would log a second
// one at the next failure. A command sent since does; so do the
// commands of a stall, which Redis answered.
func TestSuccessOfACommandFromBeforeAFailureIsNotARecovery(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	o := &OutageLog{Log: ptr(zerolog.New(&buf))}
	sent := time.Now()
	time.Sleep(time.Millisecond)
	o.Failed(errors.New("EOF"))
	o.OKSince(sent)
	require.True(t, o.Down(), "a reply on its way before the failure")
	o.Failed(errors.New("connection refused"))
	o.OKSince(time.Now())
	require.False(t, o.Down())
	require.Equal(t, 1, strings.Count(buf.String(), "redis unavailable"), buf.String())
	require.Equal(t, 1, strings.Count(buf.String(), "redis is back"), buf.String())

	sent = time.Now()
	time.Sleep(time.Millisecond)
	o.Stalled(time.Millisecond / 2) // began after sent
	o.OKSince(sent)
	require.False(t, o.Down(), "a stalled command's answer ends the stall")
}
