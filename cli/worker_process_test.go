package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/gojobtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// runLog is a file the jobs of a test append their jid to, one line per
// run (an --exec command's append is atomic).
type runLog string

func newRunLog(t *testing.T) runLog { return runLog(filepath.Join(t.TempDir(), "runs")) }

// execArg is the --exec handler that records each run of class.
func (r runLog) execArg(class string) string {
	return class + `=echo "$GOJOB_JID" >> ` + string(r)
}

// counts returns how many times each jid ran.
func (r runLog) counts(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	f, err := os.Open(string(r))
	if os.IsNotExist(err) {
		return out
	}
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out[l]++
		}
	}
	return out
}

func (r runLog) total(t testing.TB) int {
	n := 0
	for _, c := range r.counts(t) {
		n += c
	}
	return n
}

// workerProc is a real `gojob work` process.
type workerProc = gojobtest.Proc

// startWorker runs `gojob work -r url args…`.
func startWorker(t *testing.T, url string, args ...string) *workerProc {
	t.Helper()
	return gojobtest.Start(t, gojobBinary(t), append([]string{"work", "-r", url, "--sidekiq-version", "7"}, args...)...)
}

// pushJobs pushes n jobs of class with jids "<prefix><i>".
func pushJobs(t *testing.T, pool *redis.Pool, class, prefix string, n int, queues ...string) []string {
	t.Helper()
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version7})
	require.NoError(t, err)
	var jobs []*wire.Job
	var jids []string
	for i := range n {
		j, err := wire.NewJob(class, i)
		require.NoError(t, err)
		jid := fmt.Sprintf("%s%06d", prefix, i)
		j.Set("jid", rubyjson.StringValue(jid))
		if len(queues) > 0 {
			j.SetQueue(queues[i%len(queues)])
		}
		jobs = append(jobs, j)
		jids = append(jids, jid)
	}
	_, err = client.PushBulk(context.Background(), jobs, nil)
	require.NoError(t, err)
	return jids
}

// workingJIDs returns the jids in the in-progress lists of identity.
func workingJIDs(t *testing.T, c redis.Conn, identity string) []string {
	t.Helper()
	var out []string
	for _, v := range redistest.InProgress(t, c, identity) {
		j, err := wire.ParseJob([]byte(v))
		require.NoError(t, err)
		out = append(out, j.JID())
	}
	return out
}
