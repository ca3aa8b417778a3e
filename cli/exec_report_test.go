package cli

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// fd 4 lines are read whole across writes; a line longer than
// maxReportLine is only a heartbeat, even in pieces; the last outcome
// line wins.
func TestReadBeatsReadsReportLines(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	rep := &execReport{jid: "j"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		readBeats(context.Background(), r, rep, new(atomic.Bool))
	}()
	writes := []string{
		`{"outcome":"discard"}` + "\n",
		"not json\n",
		`{"outcome":"sno`, `oze","in":2.5}` + "\n",
		`{"outcome":"bogus"}` + "\n",
		// Valid, but too long to be read as a report.
		`{"outcome":"retry_in","in":1,"pad":"` + strings.Repeat("x", maxReportLine) + `"}` + "\n",
	}
	for _, s := range writes {
		_, err := w.WriteString(s)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	<-done
	r.Close()
	require.Equal(t, "snooze", rep.out)
	require.Equal(t, 2500*time.Millisecond, rep.in)
}

// Everything a command wrote on fd 4 before it exited is read, however far
// behind the reader is (each report is a Redis write): its last line, the
// result, is not lost with the pipe. A child the command leaves holding
// fd 4 delays the job's end by reportDrain, not until the child exits.
func TestLastReportLinesSurviveTheCommandsExit(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	w := startWorker(t, rs.URL(), "-c", "2", "--exec",
		`Many=i=0; while [ $i -lt 2000 ]; do echo '{"progress":0.5}'; i=$((i+1)); done >&4; echo '{"result":{"last":true}}' >&4`,
		"--exec", `Orphan=echo '{"result":{"left":1}}' >&4; sleep 30 >/dev/null 2>&1 &`)
	w.Identity(t)
	for _, c := range []struct{ class, result string }{{"Many", `{"last":true}`}, {"Orphan", `{"left":1}`}} {
		jid := pushOne(t, pool, c.class)
		start := time.Now()
		var v jobView
		wait.Within(t, 30*time.Second, c.class+"'s outcome", func() bool {
			out, _, code := runBinary(t, "job", "-r", rs.URL(), "--json", jid)
			if code != 0 {
				return false
			}
			require.NoError(t, json.Unmarshal([]byte(out), &v))
			return v.Status != nil && v.Status.Outcome == "success"
		})
		require.JSONEq(t, c.result, string(v.Status.Result), c.class)
		if c.class == "Orphan" {
			require.Less(t, time.Since(start), 10*time.Second, "the job ended without waiting for the child")
		}
	}
}
