package durable

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// rubyTable is the table of docs/durable.md#table in Sequel's
// create_table DSL, as Amigo's ensure_jobs_tables declares it, followed by
// helpers that write rows the way Amigo's insert_job and lock_job do.
const rubyTable = `
require "sequel"
DB = Sequel.connect(ENV.fetch("DJ_URL"), test: false, keep_reference: false)
FQN = Sequel[:public][ENV.fetch("DJ_TABLE").to_sym]
def create_amigo_table(fqn)
  DB.create_table(fqn, if_not_exists: true) do
    text :job_id, null: false, unique: true
    text :job_class, null: false
    text :job_item_json, null: false
    text :queue, null: false
    timestamptz :inserted_at, null: false, default: Sequel.function(:now)
    timestamptz :assume_dead_at, null: false
    text :locked_by
    timestamptz :locked_at
    timestamptz :missing_at
  end
end
def amigo_insert(item, ext, queue: "default", more: {})
  run_at = item.key?("at") ? Time.at(item["at"]) : Time.now
  json = item.to_json
  DB[FQN].insert_conflict(target: :job_id, update: {assume_dead_at: run_at + ext, job_item_json: json}).
    insert(job_id: item["jid"], job_class: item["class"], job_item_json: json, assume_dead_at: run_at + ext, queue: queue, **more)
end
`

// columnsOf lists a table's columns and its constraints as text, in the
// database of url.
func columnsOf(t *testing.T, url, table string) []string {
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '')
FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`, table)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	rows.Close()
	require.NoError(t, rows.Err())
	cons, err := db.Query(ctx, `SELECT c.conname || ' ' || pg_get_constraintdef(c.oid) FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid WHERE t.relname = $1 ORDER BY 1`, table)
	require.NoError(t, err)
	defer cons.Close()
	for cons.Next() {
		var s string
		require.NoError(t, cons.Scan(&s))
		out = append(out, strings.Replace(s, table, "<table>", 1))
	}
	return out
}

// TestRubyAmigoSharesTheTable proves with real Ruby (Sequel + pg) that
// gojob and Amigo::DurableJob share one table: the DDL is the same, gojob
// reconciles rows Ruby wrote, and Ruby reads rows gojob wrote.
func TestRubyAmigoSharesTheTable(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	url := pgtest.Databases(t)[0]
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	table := uniqueTable()
	ruby := func(script string) string {
		t.Helper()
		return rubytest.Run(t, rs.URL(), fmt.Sprintf("ENV[%q] = %q\nENV[%q] = %q\n", "DJ_URL", url, "DJ_TABLE", table)+rubyTable+script)
	}

	// Ruby creates the table; gojob finds it up to date, and its own table
	// is column for column, constraint for constraint, the same.
	ruby(`create_amigo_table(FQN)`)
	b := setup(t, bundleOpts{urls: []string{url}, table: table})
	res, err := b.d.Migrate(context.Background())
	require.NoError(t, err)
	require.Equal(t, []DatabaseMigration{{Database: b.d.stores[0].Name()}}, res)
	goTable := uniqueTable()
	setup(t, bundleOpts{urls: []string{url}, table: goTable})
	require.Equal(t, columnsOf(t, url, table), columnsOf(t, url, goTable))

	// Ruby inserts two rows as insert_job does (one already struck once),
	// 5 minutes ago in Ruby's real time; gojob's reconciler, 1 minute
	// later, marks one and kills the other.
	out := ruby(`
now = Time.now - 360
amigo_insert({"class" => "DurableJob", "args" => [1, "x"], "jid" => "rubyjid1", "queue" => "default", "retry" => true, "created_at" => now.to_f}, 300)
DB[FQN].where(job_id: "rubyjid1").update(assume_dead_at: now + 300)
amigo_insert({"class" => "Ruby::Only", "args" => [], "jid" => "rubyjid2", "queue" => "default"}, 300, more: {missing_at: now})
DB[FQN].where(job_id: "rubyjid2").update(assume_dead_at: now + 300)
puts DB[FQN].count
`)
	require.Equal(t, "2\n", out)
	b.clk.Set(time.Now())
	rec := b.reconcile(t, b.reconciler(t, nil))
	require.Equal(t, 1, rec.Marked)
	require.Equal(t, []string{"rubyjid2"}, rec.KilledJIDs)
	dead := b.deadJobs(t)
	require.Len(t, dead, 1)
	require.Equal(t, "Ruby::Only", dead[0].Class())
	marked := b.row(t, "rubyjid1")
	require.NotNil(t, marked.MissingAt)

	// gojob writes a row (client middleware) and locks another: Ruby reads
	// them with Sequel, and its job_item_json is the pushed job.
	job := newJob(t, "DurableJob", map[string]any{"n": 1.5})
	b.clk.Set(time.Now())
	_, err = b.client.Push(context.Background(), job, nil)
	require.NoError(t, err)
	run := &sidekiq.Run{Job: mustParse(t, marked.ItemJSON), Identity: "gohost:42:abcdef012345"}
	err = b.d.Run(context.Background(), run, func(ctx context.Context) error {
		out = ruby(fmt.Sprintf(`
r = DB[FQN].where(job_id: %q).first
item = JSON.parse(r[:job_item_json])
puts [r[:job_class], r[:queue], item["jid"], item["args"].inspect, r[:locked_by].inspect, ((r[:assume_dead_at] - Time.now) / 60).round].join("|")
l = DB[FQN].where(job_id: "rubyjid1").first
puts [l[:locked_by], l[:missing_at].inspect, l[:locked_at].class].join("|")
`, job.JID()))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("DurableJob|default|%s|[{\"n\"=>1.5}]|nil|5\ngohost:42:abcdef012345|nil|Time\n", job.JID()), out)
	require.Nil(t, b.row(t, "rubyjid1"), "gojob deleted the Ruby row after success")
}

func mustParse(t *testing.T, s string) *wire.Job {
	t.Helper()
	j, err := wire.ParseJob([]byte(s))
	require.NoError(t, err)
	return j
}
