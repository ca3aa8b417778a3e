package cli

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// seedSet adds n jobs of class to set, each failed with errText, due or
// dead at base+i seconds after a day ago (the dead set drops entries older
// than six months).
func seedSet(t *testing.T, conn redis.Conn, set, class, errText string, n, base int) []string {
	t.Helper()
	var jids []string
	for i := range n {
		jid := fmt.Sprintf("%s%s%03d", set[:1], class[:3], i)
		payload := fmt.Sprintf(`{"class":%q,"args":[%d],"queue":"default","jid":%q,"retry":true,"created_at":1700000000.0,"enqueued_at":1700000000.0,"error_class":"RuntimeError","error_message":%q,"failed_at":1700000000.0,"retry_count":1}`,
			class, i, jid, errText)
		_, err := conn.Do("ZADD", set, time.Now().Add(-24*time.Hour).Unix()+int64(base+i), payload)
		require.NoError(t, err)
		jids = append(jids, jid)
	}
	return jids
}

func TestSetListingsFilterByClassJIDAndError(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	conn := srv.Pool(t).Get()
	defer conn.Close()
	invoices := seedSet(t, conn, "retry", "InvoiceJob", "Net::ReadTimeout from billing", 30, 1000)
	seedSet(t, conn, "retry", "MailJob", "SMTP refused", 20, 0)
	dead := seedSet(t, conn, "dead", "InvoiceJob", "card declined", 3, 0)

	type listing struct {
		Size     int  `json:"size"`
		Matching *int `json:"matching"`
		Entries  []struct {
			JID   string `json:"jid"`
			Class string `json:"class"`
		} `json:"entries"`
	}
	list := func(args ...string) listing {
		t.Helper()
		out, errOut, code := runCLI(t, append(args, "-r", url, "--json")...)
		require.Equal(t, exitOK, code, errOut)
		var l listing
		require.NoError(t, json.Unmarshal([]byte(out), &l), out)
		return l
	}
	// Every match counted, in the set's order (next due first), paged.
	l := list("retries", "--class", "InvoiceJob", "--limit", "10", "--offset", "5")
	require.Equal(t, 50, l.Size)
	require.Equal(t, 30, *l.Matching)
	require.Len(t, l.Entries, 10)
	require.Equal(t, invoices[5], l.Entries[0].JID)
	require.Equal(t, invoices[14], l.Entries[9].JID)
	l = list("retries", "--error", "smtp", "--limit", "100")
	require.Equal(t, 20, *l.Matching)
	require.Equal(t, "MailJob", l.Entries[0].Class)
	l = list("retries", "--class", "InvoiceJob", "--jid", invoices[7])
	require.Equal(t, 1, *l.Matching)
	require.Equal(t, invoices[7], l.Entries[0].JID)
	l = list("retries", "--class", "Invoice") // the class, not a part of it
	require.Equal(t, 0, *l.Matching)
	l = list("dead", "--error", "DECLINED")
	require.Equal(t, 3, *l.Matching)
	require.Equal(t, dead[2], l.Entries[0].JID, "dead: newest first")
	l = list("scheduled", "--class", "InvoiceJob")
	require.Equal(t, 0, *l.Matching)
	l = list("retries", "--search", "from billing", "--limit", "1") // the dashboard's search
	require.Equal(t, 30, *l.Matching)
	require.Equal(t, invoices[0], l.Entries[0].JID)
	l = list("retries", "--search", "smtp") // case-sensitive
	require.Equal(t, 0, *l.Matching)
	l = list("retries")
	require.Nil(t, l.Matching)
	require.Len(t, l.Entries, 25)

	out, errOut, code := runCLI(t, "retries", "--class", "MailJob", "-r", url, "--limit", "2")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "retry: 20 of 50 match class=MailJob")
	require.Regexp(t, `\n\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  `, out, "text times carry their zone")
}

func TestBulkRetryKillDelete(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	conn := srv.Pool(t).Get()
	defer conn.Close()
	seedSet(t, conn, "retry", "InvoiceJob", "Net::ReadTimeout", 600, 0) // more than one scan page
	seedSet(t, conn, "retry", "MailJob", "SMTP refused", 5, 0)
	seedSet(t, conn, "dead", "InvoiceJob", "card declined", 4, 0)
	card := func(key string) int {
		n, err := redis.Int(conn.Do("ZCARD", key))
		require.NoError(t, err)
		return n
	}
	llen := func() int {
		n, err := redis.Int(conn.Do("LLEN", "queue:default"))
		require.NoError(t, err)
		return n
	}

	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"retry"}, exitUsage},
		{[]string{"retry", "--all", "somejid"}, exitUsage},
		{[]string{"retry", "somejid", "--class", "X"}, exitUsage},
		{[]string{"retry", "--all", "--from", "schedule"}, exitUsage},
		{[]string{"delete", "--all"}, exitUsage},
		{[]string{"delete", "--all", "--from", "dead"}, exitUsage}, // no --yes, stdin not a terminal
		{[]string{"retry", "nosuchjid"}, exitNotFound},
	} {
		_, errOut, code := runCLI(t, append(c.args, "-r", url)...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
	}
	require.Equal(t, 4, card("dead"), "a refused delete --all deletes nothing")

	out, errOut, code := runCLI(t, "retry", "--all", "--class", "InvoiceJob", "-r", url, "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"count": 600`)
	require.Equal(t, 5, card("retry"))
	require.Equal(t, 600, llen())

	out, errOut, code = runCLI(t, "kill", "--all", "--error", "smtp", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "killed 5 jobs from retry")
	require.Equal(t, 0, card("retry"))
	require.Equal(t, 9, card("dead"))

	out, errOut, code = runCLI(t, "retry", "--all", "--from", "dead", "--class", "InvoiceJob", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "retried 4 jobs from dead")
	require.Equal(t, 604, llen())

	out, errOut, code = runCLI(t, "delete", "--all", "--from", "dead", "--yes", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "deleted 5 jobs from dead")
	require.Equal(t, 0, card("dead"))

	out, errOut, code = runCLI(t, "retry", "--all", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "retried 0 jobs from retry")
}

func TestQueueJobsAndClear(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	conn := srv.Pool(t).Get()
	defer conn.Close()
	for i := range 30 {
		class := "MailJob"
		if i%3 == 0 {
			class = "SmsJob"
		}
		_, errOut, code := runCLI(t, "push", class, fmt.Sprint(i), "-q", "mail", "-r", url)
		require.Equal(t, exitOK, code, errOut)
	}

	out, errOut, code := runCLI(t, "queue", "jobs", "mail", "-r", url, "--json", "--limit", "3")
	require.Equal(t, exitOK, code, errOut)
	var l struct {
		Size int `json:"size"`
		Jobs []struct {
			Class      string `json:"class"`
			EnqueuedAt string `json:"enqueued_at"`
			Payload    struct {
				Args []int `json:"args"`
			} `json:"payload"`
		} `json:"jobs"`
		Matching *int `json:"matching"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	require.Equal(t, 30, l.Size)
	require.Len(t, l.Jobs, 3)
	require.Equal(t, []int{29}, l.Jobs[0].Payload.Args, "newest first")
	require.NotEmpty(t, l.Jobs[0].EnqueuedAt)

	out, errOut, code = runCLI(t, "queue", "jobs", "mail", "--class", "SmsJob", "-r", url, "--json")
	require.Equal(t, exitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	require.Equal(t, 10, *l.Matching)
	require.Len(t, l.Jobs, 10)

	out, errOut, code = runCLI(t, "queue", "jobs", "mail", "-r", url, "--limit", "1")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "queue mail: 30 jobs")
	require.Contains(t, out, " UTC")

	_, errOut, code = runCLI(t, "queue", "jobs", "mial", "-r", url)
	require.Equal(t, exitNotFound, code, errOut)
	_, errOut, code = runCLI(t, "queue", "jobs", "-r", url)
	require.Equal(t, exitUsage, code, errOut)

	_, errOut, code = runCLI(t, "queue", "clear", "mail", "-r", url)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "--yes")
	n, err := redis.Int(conn.Do("LLEN", "queue:mail"))
	require.NoError(t, err)
	require.Equal(t, 30, n, "a refused clear deletes nothing")

	out, errOut, code = runCLI(t, "queue", "clear", "mail", "--yes", "-r", url, "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"size": 30`)
	n, err = redis.Int(conn.Do("EXISTS", "queue:mail"))
	require.NoError(t, err)
	require.Zero(t, n)
	member, err := redis.Bool(conn.Do("SISMEMBER", "queues", "mail"))
	require.NoError(t, err)
	require.False(t, member)
	_, errOut, code = runCLI(t, "queue", "clear", "mail", "--yes", "-r", url)
	require.Equal(t, exitNotFound, code, errOut)
}

// --queue selects a set's jobs by queue, in the listings and the bulk
// actions; gojob queues counts each queue's jobs in the three sets.
func TestSetsFilterByQueueAndQueuesCountThem(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	conn := srv.Pool(t).Get()
	defer conn.Close()
	add := func(set, queue, jid string, score int64) {
		payload := fmt.Sprintf(`{"class":"MailJob","args":[],"queue":%q,"jid":%q,"retry":true,"error_class":"RuntimeError","error_message":"boom"}`, queue, jid)
		_, err := conn.Do("ZADD", set, score, payload)
		require.NoError(t, err)
	}
	now := time.Now().Unix()
	add("retry", "mail", "rmail1", now+10)
	add("retry", "mail", "rmail2", now+20)
	add("retry", "mail/eu", "rmaileu", now+30)
	add("retry", "default", "rdef", now+40)
	add("schedule", "mail", "smail", now+50)
	add("dead", "reports", "dreports", now-50)
	_, err := conn.Do("SADD", "queues", "mail", "default")
	require.NoError(t, err)

	out, errOut, code := runCLI(t, "retries", "--queue", "mail", "-r", url, "--json")
	require.Equal(t, exitOK, code, errOut)
	var l struct {
		Size     int `json:"size"`
		Matching int `json:"matching"`
		Entries  []struct {
			JID   string `json:"jid"`
			Queue string `json:"queue"`
		} `json:"entries"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	require.Equal(t, 4, l.Size)
	require.Equal(t, 2, l.Matching, "mail, not mail/eu: the whole name")
	require.Equal(t, "rmail1", l.Entries[0].JID)
	require.Equal(t, "rmail2", l.Entries[1].JID)

	out, errOut, code = runCLI(t, "scheduled", "-q", "mail", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "schedule: 1 of 1 match queue=mail")
	out, errOut, code = runCLI(t, "dead", "--queue", "mail", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "dead: 0 of 1 match queue=mail")

	out, errOut, code = runCLI(t, "queues", "-r", url, "--json")
	require.Equal(t, exitOK, code, errOut)
	var qs []struct {
		Name      string `json:"name"`
		Retries   int    `json:"retries"`
		Scheduled int    `json:"scheduled"`
		Dead      int    `json:"dead"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &qs), out)
	counts := map[string][3]int{}
	for _, q := range qs {
		counts[q.Name] = [3]int{q.Retries, q.Scheduled, q.Dead}
	}
	require.Equal(t, map[string][3]int{
		"default": {1, 0, 0}, "mail": {2, 1, 0}, "mail/eu": {1, 0, 0}, "reports": {0, 0, 1},
	}, counts, "a queue known only from the sets is listed too")
	out, errOut, code = runCLI(t, "queues", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `QUEUE +SIZE +LATENCY +RETRIES +SCHEDULED +DEAD +STATE`, out)

	out, errOut, code = runCLI(t, "kill", "--all", "--queue", "mail", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "killed 2 jobs from retry")
	n, err := redis.Int(conn.Do("ZCARD", "retry"))
	require.NoError(t, err)
	require.Equal(t, 2, n, "only mail's jobs were killed")
}

// A bulk kill that the dead set's cap (dead_max_jobs 10,000: the trim keeps
// 9,999) would make drop jobs says so before it runs and needs --yes off a
// terminal; it then states how many the cap dropped.
func TestKillAllStatesWhatTheDeadSetCapDropped(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	conn := srv.Pool(t).Get()
	defer conn.Close()
	const n = 10500
	base := time.Now().Add(time.Hour).Unix()
	for i := range n {
		require.NoError(t, conn.Send("ZADD", "schedule", base+int64(i), fmt.Sprintf(`{"class":"ReportJob","args":[%d],"queue":"default","jid":"s%05d"}`, i, i)))
	}
	require.NoError(t, conn.Flush())
	for range n {
		_, err := conn.Receive()
		require.NoError(t, err)
	}
	card := func(key string) int {
		c, err := redis.Int(conn.Do("ZCARD", key))
		require.NoError(t, err)
		return c
	}

	_, errOut, code := runCLI(t, "kill", "--all", "--from", "schedule", "-r", url)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "Killing 10500 jobs drops 501 dead jobs")
	require.Contains(t, errOut, "at most 9999 jobs for 180 days")
	require.Contains(t, errOut, "--yes")
	require.Equal(t, n, card("schedule"), "a refused kill changes nothing")
	require.Zero(t, card("dead"))

	out, errOut, code := runCLI(t, "kill", "--all", "--from", "schedule", "--yes", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "killed 10500 jobs from schedule")
	require.Contains(t, out, "the dead set's cap dropped 501 jobs, the oldest")
	require.Zero(t, card("schedule"))
	require.Equal(t, 9999, card("dead"))

	// One more, by JID, from a full dead set: it says the cap dropped one.
	_, err := conn.Do("ZADD", "retry", base, `{"class":"ReportJob","args":[],"queue":"default","jid":"r1"}`)
	require.NoError(t, err)
	out, errOut, code = runCLI(t, "kill", "r1", "-r", url, "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"dropped": 1`)
}
