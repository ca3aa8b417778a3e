package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/cli/internal/top"
	"github.com/gojob/gojob/internal/redact"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
)

// topCommand is gojob top (docs/cli.md "gojob top").
func topCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "top",
		Usage: "live terminal dashboard: queues, processes, running jobs, set sizes, rates; p pauses a queue, Q quiets a process",
		Description: `Refreshes every --interval; works on any cluster (Ruby processes too). Keys: tab
switches between the queues and the processes, up/down (j/k) select, p pauses or
unpauses the selected queue (as gojob queue pause), Q quiets the selected process
(as the Web UI's Quiet; asks first), r refreshes, q or Ctrl-C quits. When stdout
is not a terminal, or with --once or --json, it prints one snapshot and exits.`,
		Flags: []ucli.Flag{newRedisFlag(), newJSONFlag(),
			&ucli.DurationFlag{Name: "interval", Aliases: []string{"n"}, Value: time.Second, Usage: "time between refreshes (at least 100ms); --once measures the rates over it"},
			&ucli.BoolFlag{Name: "once", Usage: "print one snapshot and exit (the default when stdout is not a terminal)"},
		},
		Before: func(c *ucli.Context) error {
			if c.Duration("interval") < 100*time.Millisecond {
				return usageError("gojob top", "--interval must be at least 100ms")
			}
			if c.NArg() > 0 {
				return usageError("gojob top", "top takes no arguments")
			}
			return nil
		},
		Action: topAction,
	}
}

func topAction(c *ucli.Context) error {
	url := c.String("redis")
	pool, err := sidekiq.NewPool(url)
	if err != nil {
		return ucli.Exit(redact.String(err.Error(), url), exitUsage)
	}
	pool.MaxActive, pool.Wait = 4, true
	defer pool.Close()
	admin, err := api.New(&api.Config{Pool: pool})
	if err != nil {
		return err
	}
	src := &top.APISource{API: admin, Pool: pool}
	interval := c.Duration("interval")
	out, isFile := c.App.Writer.(*os.File)
	if c.Bool("once") || c.Bool("json") || !isFile || !term.IsTerminal(out.Fd()) {
		return topOnce(c, src, url, interval)
	}
	m := top.NewModel(top.Config{Source: src, Title: redact.URL(url), Interval: interval, Context: c.Context})
	p := tea.NewProgram(m, tea.WithContext(c.Context), tea.WithOutput(out))
	if _, err := p.Run(); err != nil && !errors.Is(err, tea.ErrProgramKilled) {
		return err
	}
	return nil
}

// topOnce prints one snapshot: the text layout at the terminal's width
// (COLUMNS, else 120 columns, off a terminal) with every row, or JSON. The
// rates are measured over one interval.
func topOnce(c *ucli.Context, src top.Source, url string, interval time.Duration) error {
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second+interval)
	defer cancel()
	unreachable := func(err error) error {
		return ucli.Exit(redact.String(fmt.Sprintf("cannot reach Redis at %s: %v", redact.URL(url), err), url), exitUnreachable)
	}
	first, err := src.Snapshot(ctx)
	if err != nil {
		return unreachable(err)
	}
	select {
	case <-time.After(interval):
	case <-ctx.Done():
		return ctx.Err()
	}
	snap, err := src.Snapshot(ctx)
	if err != nil {
		return err
	}
	rates := top.RatesBetween(first, snap)
	if c.Bool("json") {
		snap.Rates = &top.RatesJSON{Processed: rates.Processed, Failed: rates.Failed}
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(snap)
	}
	width := 120
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		width = n
	} else if f, ok := c.App.Writer.(*os.File); ok && term.IsTerminal(f.Fd()) {
		if w, _, err := term.GetSize(f.Fd()); err == nil && w > 0 {
			width = w
		}
	}
	st := top.State{Title: redact.URL(url), Now: snap.At, Snap: snap, Rates: rates}
	_, err = fmt.Fprintln(c.App.Writer, top.Render(st, width, 0, true))
	return err
}
