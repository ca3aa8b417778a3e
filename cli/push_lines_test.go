package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/sidekiq/wire"
)

// gojobStdin runs the gojob binary with stdin, with a clean durable
// environment, and returns its stdout, stderr and exit code.
func gojobStdin(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(gojobBinary(t), args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "DURABLE_JOB_SERVER_URLS=")
	cmd.Stdin = strings.NewReader(stdin)
	out, errb := testlog.New(nil), testlog.New(nil)
	cmd.Stdout, cmd.Stderr = out, errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// The per-push values (jid, times) made comparable.
var pushVolatile = regexp.MustCompile(`"(jid|created_at|enqueued_at)":("[^"]*"|[0-9.]+)`)

func stable(payload string) string { return pushVolatile.ReplaceAllString(payload, `"$1":X`) }

// `gojob push -` pushes each JSON line to its queue, writing what `gojob
// push` writes for the same options, and reports what it did.
func TestPushLinesReal(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	conn, err := srv.Dial()
	require.NoError(t, err)
	defer conn.Close()

	out, errOut, code := gojobStdin(t, `{"class":"MailJob","args":[1,"two",{"three":3.5}],"queue":"mail"}
{"class":"ReportJob","args":[],"queue":"reports","retry":2}
`, "push", "-", "-r", url)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "read 2 jobs: 2 pushed\n", out)
	mail, err := redis.Strings(conn.Do("LRANGE", "queue:mail", 0, -1))
	require.NoError(t, err)
	require.Len(t, mail, 1)
	reports, err := redis.Strings(conn.Do("LRANGE", "queue:reports", 0, -1))
	require.NoError(t, err)
	require.Len(t, reports, 1)
	queues, err := redis.Strings(conn.Do("SMEMBERS", "queues"))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"mail", "reports"}, queues)

	// The same bytes as `gojob push` with the same options, but for the
	// jid and the times.
	single := func(args ...string) string {
		t.Helper()
		out, errOut, code := gojobStdin(t, "", append([]string{"push", "-r", url, "--json"}, args...)...)
		require.Equal(t, 0, code, errOut)
		var res struct{ Payload json.RawMessage }
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, res.Payload))
		return compact.String()
	}
	require.Equal(t, stable(single("-q", "mail", "MailJob", "1", "two", `{"three":3.5}`)), stable(mail[0]))
	require.Equal(t, stable(single("-q", "reports", "--retry", "2", "ReportJob")), stable(reports[0]))

	// Scheduled (epoch and RFC 3339, "in"), unique, timeouts and a jid;
	// --queue is the default of lines that name none.
	out, errOut, code = gojobStdin(t, `{"class":"Later","args":["a"],"at":1999999999.5}
{"class":"Later","args":["b"],"at":"2033-05-18T03:33:20Z","retry":false}
{"class":"Soon","in":"1h","unique_for":60}
{"class":"Now","jid":"0123456789abcdef01234567","timeout":30,"heartbeat_timeout":5.5,"unique_for":10,"unique_until":"start"}
{"class":"Now","jid":"0123456789abcdef01234568","timeout":30,"heartbeat_timeout":5.5,"unique_for":10,"unique_until":"start"}
{"class":"Past","at":1000000000}
`, "push", "-", "-r", url, "-q", "low", "--json")
	require.Equal(t, 5, code, "the second Now is refused by the unique lock: %s", errOut)
	require.Contains(t, errOut, "push -: 1 job not pushed: a unique lock holds it (lines 5)")
	var rep pushLinesReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, 6, rep.Read)
	require.Equal(t, 5, rep.Pushed)
	require.Equal(t, 3, rep.Scheduled)
	require.Equal(t, 1, rep.Duplicates)
	require.Equal(t, []int{5}, rep.DuplicateLines)
	require.Equal(t, "0123456789abcdef01234567", rep.JIDs[3])
	require.Empty(t, rep.JIDs[4])
	sched, err := redis.Strings(conn.Do("ZRANGE", "schedule", 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.Len(t, sched, 6)
	require.Equal(t, "1999999999.5", sched[3])
	require.Equal(t, "2000000000", sched[5])
	require.Equal(t, stable(single("-q", "low", "--at", "2033-05-18T03:33:20Z", "--retry", "false", "Later", "b")), stable(sched[4]))
	low, err := redis.Strings(conn.Do("LRANGE", "queue:low", 0, -1))
	require.NoError(t, err)
	require.Len(t, low, 2, "Now and Past (a time gone is now)")
	// With a jid, as Ruby's Job.set(jid: …): an option, before args.
	require.Equal(t, `{"retry":true,"queue":"low","jid":X,"unique_for":10.0,"unique_until":"start","timeout":30,"heartbeat_timeout":5.5,"args":[],"class":"Now","created_at":X,"enqueued_at":X}`,
		stable(low[1]))
	job, err := wire.ParseJob([]byte(low[1]))
	require.NoError(t, err)
	_, err = conn.Do("DEL", contract.UniqueKey(job))
	require.NoError(t, err)
	noJID := func(s string) string { return strings.Replace(stable(s), `"jid":X,`, "", 1) }
	require.Equal(t, noJID(single("-q", "low", "--timeout", "30", "--heartbeat-timeout", "5.5", "--unique-for", "10",
		"--unique-until", "start", "Now")), noJID(low[1]))

	// Ordered queues: "key" (and "score").
	out, errOut, code = gojobStdin(t, `{"class":"Ord","args":[1],"queue":"ordq","key":"k1"}
{"class":"Ord","args":[2],"queue":"ordq","key":"k1","score":7}
`, "push", "-", "-r", url)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "read 2 jobs: 0 pushed, 2 to ordered queues (0 merged into an equal pending job)\n", out)
}

// A bad line pushes nothing: every bad line is named (up to 20), and the
// command exits 2 before it reaches Redis.
func TestPushLinesBadInputPushesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	conn, err := srv.Dial()
	require.NoError(t, err)
	defer conn.Close()
	out, errOut, code := gojobStdin(t, `{"class":"Good","args":[1]}

{"class":"Bad","args":1}
{"class":"Odd","colour":"red"}
not json
{"args":[]}
{"class":"X","retry":-1}
{"class":"X","at":"tomorrow"}
{"class":"X","key":"k","in":5}
{"class":"X","unique_until":"start"}
{"class":"X","durable":true}
{"class":"X","key":"k","queue":"a b"}
{"class":"Good","args":[2]}
`, "push", "-", "-r", srv.URL())
	require.Equal(t, 2, code)
	require.Empty(t, out)
	for _, want := range []string{
		`push -: line 3: "args" must be an array, not 1`,
		`push -: line 4: unknown field "colour" (a line has class, args, queue, retry, at, in, expires_in, jid, unique_for, unique_until, timeout, heartbeat_timeout, key, score, batch)`,
		`push -: line 5: not a JSON object`,
		`push -: line 6: "class" is required`,
		`push -: line 7: "retry" must be true, false or a number of retries, not -1`,
		`push -: line 8: at: `,
		`push -: line 9: key takes no in, at, unique_for or retry`,
		`push -: line 10: unique_until needs unique_for`,
		`push -: line 11: unknown field "durable": --durable makes every line's job durable`,
		`push -: line 12: ordered: queue name must be non-empty and contain no '{', '}' or whitespace: "a b"`,
		`push -: nothing pushed: fix the lines above`,
	} {
		require.Contains(t, errOut, want)
	}
	n, err := redis.Int(conn.Do("DBSIZE"))
	require.NoError(t, err)
	require.Zero(t, n, "nothing pushed")

	// A batch that does not exist: exit 4 before anything is pushed.
	_, errOut, code = gojobStdin(t, `{"class":"Good"}
{"class":"InBatch","batch":"nosuch"}
`, "push", "-", "-r", srv.URL())
	require.Equal(t, 4, code, errOut)
	require.Contains(t, errOut, "push -: line 2: no batch nosuch; nothing pushed")
	n, err = redis.Int(conn.Do("DBSIZE"))
	require.NoError(t, err)
	require.Zero(t, n, "nothing pushed")

	// Arguments after - are a usage error; so is an unreachable Redis
	// (exit 3) once the input is good.
	_, errOut, code = gojobStdin(t, "", "push", "-", "Extra", "-r", srv.URL())
	require.Equal(t, 2, code, errOut)
	_, errOut, code = gojobStdin(t, `{"class":"Good"}`, "push", "-", "-r", "redis://127.0.0.1:1/0")
	require.Equal(t, 3, code, errOut)
}

// Many lines go in round trips of --bulk jobs, in order, each queue's jobs
// in the order of their lines.
func TestPushLinesManyInOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	conn, err := srv.Dial()
	require.NoError(t, err)
	defer conn.Close()
	var in strings.Builder
	const n = 2500
	for i := range n {
		fmt.Fprintf(&in, `{"class":"Many","args":[%d],"queue":"q%d"}`+"\n", i, i%3)
	}
	// A line longer than the reader's buffer.
	fmt.Fprintf(&in, `{"class":"Big","args":[%q]}`+"\n", strings.Repeat("x", 200_000))
	out, errOut, code := gojobStdin(t, in.String(), "push", "-", "-r", srv.URL(), "--bulk", "300")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, fmt.Sprintf("read %d jobs: %d pushed\n", n+1, n+1), out)
	for q := range 3 {
		vals, err := redis.Strings(conn.Do("LRANGE", fmt.Sprintf("queue:q%d", q), 0, -1))
		require.NoError(t, err)
		// LPUSH: the newest first; the oldest (first line) at the tail.
		for k, v := range vals {
			i := q + 3*(len(vals)-1-k)
			require.Contains(t, v, fmt.Sprintf(`"args":[%d]`, i))
		}
	}
	big, err := redis.String(conn.Do("LINDEX", "queue:default", 0))
	require.NoError(t, err)
	require.Contains(t, big, strings.Repeat("x", 200_000))
	_, errOut, code = gojobStdin(t, "", "push", "-", "-r", srv.URL(), "--bulk", "0")
	require.Equal(t, 2, code, errOut)
}
