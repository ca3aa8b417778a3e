package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
)

// durableApp is an app with the durable command and a minimal work
// command that calls setupDurable (cli.go and work.go wire the real ones).
func durableApp(out, errw *bytes.Buffer, work ucli.ActionFunc) *ucli.App {
	return &ucli.App{
		Name: "gojob", Writer: out, ErrWriter: errw, DisableSliceFlagSeparator: true,
		ExitErrHandler: func(*ucli.Context, error) {},
		Commands: []*ucli.Command{
			durableCommand(&options{}),
			{Name: "work", Flags: append([]ucli.Flag{newRedisFlag()}, durableWorkFlags()...), Action: work},
		},
	}
}

func TestDurableMigrateStatusPoll(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("DURABLE_JOB_SERVER_URLS", "")
	db := "sqlite:" + filepath.Join(t.TempDir(), "d.db")
	rs := redistest.Start(t)
	var out, errb bytes.Buffer
	run := func(args ...string) error {
		out.Reset()
		errb.Reset()
		return durableApp(&out, &errb, nil).RunContext(context.Background(), append([]string{"gojob"}, args...))
	}
	require.NoError(t, run("durable", "migrate", "--db", db))
	require.Contains(t, out.String(), "created the table")
	require.NoError(t, run("durable", "migrate", "--db", db))
	require.Contains(t, out.String(), "up to date")

	// work --durable installs the middleware: a push writes a row.
	var pushed string
	work := func(c *ucli.Context) error {
		srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: rs.Pool(t), DisablePoller: true, HeartbeatInterval: time.Hour})
		if err != nil {
			return err
		}
		stop, err := setupDurable(c, srv, srv.Client(), zerolog.New(zerolog.NewTestWriter(t)))
		if err != nil {
			return err
		}
		defer stop()
		res, err := srv.Client().Enqueue(c.Context, "", "BillingJob", 1)
		if err != nil {
			return err
		}
		pushed = res.JID
		_, err = srv.Client().Enqueue(c.Context, "", "OtherJob", 1)
		return err
	}
	app := durableApp(&out, &errb, work)
	err := app.RunContext(context.Background(), []string{"gojob", "work", "-r", rs.URL(), "--durable", "--durable-db", db})
	require.ErrorContains(t, err, "--durable-class")
	require.NoError(t, app.RunContext(context.Background(), []string{"gojob", "work", "-r", rs.URL(), "--durable", "--durable-db", db,
		"--durable-class", "BillingJob=10m", "--durable-poll-interval", "1h"}))
	require.NotEmpty(t, pushed)

	require.NoError(t, run("durable", "status", "--db", db, "--json"))
	var st struct {
		Databases []struct {
			Total   int64 `json:"total"`
			Waiting int64 `json:"waiting"`
		} `json:"databases"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &st))
	require.Len(t, st.Databases, 1)
	require.Equal(t, int64(1), st.Databases[0].Total, "only the durable class has a row")
	require.Equal(t, int64(1), st.Databases[0].Waiting)
	require.NoError(t, run("durable", "status", "--db", db))
	require.Contains(t, out.String(), "WAITING")

	require.NoError(t, run("durable", "poll", "--db", db, "-r", rs.URL(), "--json"))
	var poll struct {
		Totals struct {
			Checked int `json:"checked"`
		} `json:"totals"`
		Killed []string `json:"killed_jids"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &poll))
	require.Equal(t, 0, poll.Totals.Checked, "nothing is overdue yet")
	require.Empty(t, poll.Killed)

	err = run("durable", "status", "--db", "sqlite:/nonexistent-gojob-dir/x.db")
	require.Error(t, err)
	require.Contains(t, out.String(), "error")
}

// The storage list is Amigo's: server_urls, then the values of the
// server_env_vars, where $DURABLE_JOB_SERVER_ENV_VARS replaces the default
// DATABASE_URL (Appydays' env value replaces a setting's default) rather
// than adding to it, so Ruby and gojob write to the same databases.
func TestDurableURLsFollowAmigoServerEnvVars(t *testing.T) {
	urlsOf := func(args ...string) []string {
		var got []string
		app := &ucli.App{Name: "gojob", Writer: &bytes.Buffer{}, ErrWriter: &bytes.Buffer{}, DisableSliceFlagSeparator: true,
			ExitErrHandler: func(*ucli.Context, error) {},
			Commands: []*ucli.Command{{Name: "urls", Flags: durableDBFlags(""), Action: func(c *ucli.Context) error {
				got = durableURLs(c, "")
				return nil
			}}}}
		require.NoError(t, app.Run(append([]string{"gojob", "urls"}, args...)))
		return got
	}
	t.Setenv("DURABLE_JOB_SERVER_URLS", "sqlite:first.db")
	t.Setenv("DATABASE_URL", "sqlite:app.db")
	t.Setenv("DJ_URL", "sqlite:dj.db")

	require.Equal(t, []string{"sqlite:first.db", "sqlite:app.db"}, urlsOf(), "default server_env_vars: DATABASE_URL")
	t.Setenv("DURABLE_JOB_SERVER_ENV_VARS", "DJ_URL")
	require.Equal(t, []string{"sqlite:first.db", "sqlite:dj.db"}, urlsOf(), "the env var replaces the default list")
	t.Setenv("DURABLE_JOB_SERVER_ENV_VARS", "")
	require.Equal(t, []string{"sqlite:first.db"}, urlsOf(), "set but empty: no env-var databases")
	require.Equal(t, []string{"sqlite:first.db", "sqlite:app.db"}, urlsOf("--db-env", "DATABASE_URL"), "the flag wins")
}

// DISABLE_DURABLE_JOBS_POLL disables the reconciler when set to anything,
// as webhookdb's `if ENV["DISABLE_DURABLE_JOBS_POLL"]` does; a value that
// is not a Go boolean must not stop the worker from starting.
func TestDisableDurablePollEnvTakesAnyValue(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("DURABLE_JOB_SERVER_URLS", "")
	db := "sqlite:" + filepath.Join(t.TempDir(), "d.db")
	rs := redistest.Start(t)
	for _, v := range []string{"yes", "", "1"} {
		t.Setenv("DISABLE_DURABLE_JOBS_POLL", v)
		polling := true
		work := func(c *ucli.Context) error {
			polling = !durableNoPoll(c)
			return nil
		}
		var out, errb bytes.Buffer
		err := durableApp(&out, &errb, work).RunContext(context.Background(), []string{"gojob", "work", "-r", rs.URL(), "--durable",
			"--durable-db", db, "--durable-class", "BillingJob"})
		require.NoError(t, err, "DISABLE_DURABLE_JOBS_POLL=%q", v)
		require.False(t, polling, "DISABLE_DURABLE_JOBS_POLL=%q", v)
	}
}

// A password given as a query parameter is masked like one in the
// userinfo, in the text and JSON of status and poll and in their errors.
func TestDurableStatusAndPollMaskQueryPasswords(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("DURABLE_JOB_SERVER_URLS", "")
	const secret = "Sup3rSecretPW"
	db := "postgres://app@127.0.0.1:1/app?sslmode=disable&password=" + secret
	rs := redistest.Start(t)
	var out, errb bytes.Buffer
	for _, args := range [][]string{
		{"durable", "status", "--db", db},
		{"durable", "status", "--db", db, "--json"},
		{"durable", "poll", "--db", db, "-r", rs.URL()},
		{"durable", "poll", "--db", db, "-r", rs.URL(), "--json"},
	} {
		out.Reset()
		errb.Reset()
		err := durableApp(&out, &errb, nil).RunContext(context.Background(), append([]string{"gojob"}, args...))
		printed := out.String() + errb.String()
		if err != nil {
			printed += err.Error()
		}
		require.NotContains(t, printed, secret, args)
		require.Contains(t, printed, "password=xxxxx", args)
	}
}
