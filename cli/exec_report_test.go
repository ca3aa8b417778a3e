package cli

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fd 4 lines are read whole across writes; a line longer than
// maxReportLine is only a heartbeat, even in pieces; the last outcome
// line wins.
func TestReadBeatsReadsReportLines(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	rep := &execReport{h: &execHandler{}, jid: "j"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		readBeats(context.Background(), r, rep)
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
