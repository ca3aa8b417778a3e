package top

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/require"
)

var now = time.Date(2026, 11, 28, 18, 0, 0, 0, time.UTC)

// bigSnapshot is a busy cluster: more queues, processes and jobs than 24
// rows hold, long names, large numbers.
func bigSnapshot() *Snapshot {
	s := &Snapshot{At: now, Processed: 123_456_789, Failed: 12_345_678, Enqueued: 200_000, Scheduled: 20_000,
		Retries: 20_000, Dead: 5_000, Busy: 30}
	for i := range 20 {
		s.Queues = append(s.Queues, Queue{Name: fmt.Sprintf("queue_%02d", i), Size: int64(i * 10_000),
			Latency: time.Duration(i) * 7 * time.Second, Paused: i == 3})
	}
	s.Queues = append(s.Queues, Queue{Name: "a_very_long_queue_name_that_goes_on_and_on_and_on_and_on_past_any_column",
		Size: 1, Latency: -1})
	for i := range 5 {
		s.Processes = append(s.Processes, Process{Identity: fmt.Sprintf("worker-%d.example.internal:%d:0c3472b4ef2f", i, 1000+i),
			Tag: "app", Version: "7.3.10", Busy: 6, Concurrency: 10, Quiet: i == 2, Beat: now.Add(-3 * time.Second)})
	}
	for i := range 30 {
		s.Jobs = append(s.Jobs, BusyJob{Identity: s.Processes[i%5].Identity, TID: fmt.Sprint(i), JID: fmt.Sprintf("%024x", i),
			Class: "UserMailer", Queue: "mail", RunAt: now.Add(-time.Duration(i) * time.Minute)})
	}
	return s
}

func state(s *Snapshot) State {
	return State{Title: "redis://127.0.0.1:6379/0", Interval: time.Second, Now: now, Snap: s,
		Rates: Rates{Processed: 1234.5, Failed: 0.25, OK: true}, Selected: [2]string{"queue_00", s.Processes[0].Identity}}
}

// checkFits requires exactly height lines, none wider than width.
func checkFits(t *testing.T, out string, width, height int) []string {
	t.Helper()
	lines := strings.Split(ansi.Strip(out), "\n")
	require.Len(t, lines, height, "%dx%d:\n%s", width, height, ansi.Strip(out))
	for i, l := range lines {
		require.LessOrEqual(t, ansi.StringWidth(l), width, "%dx%d line %d: %q", width, height, i, l)
	}
	return lines
}

func TestRenderFits80x24(t *testing.T) {
	t.Parallel()
	out := Render(state(bigSnapshot()), 80, 24, false)
	lines := checkFits(t, out, 80, 24)
	text := strings.Join(lines, "\n")
	t.Log("\n" + text)
	require.Contains(t, lines[0], "gojob top  redis://127.0.0.1:6379/0")
	require.Contains(t, lines[0], now.Local().Format("15:04:05"))
	require.Contains(t, text, "processed 123,456,789 (1234.5/s)")
	require.Contains(t, text, "failed 12,345,678 (0.2/s)")
	require.Contains(t, text, "busy 30/50")
	require.Contains(t, text, "retries 20,000")
	require.Contains(t, text, "dead 5,000")
	require.Contains(t, text, "scheduled 20,000")
	require.Regexp(t, `QUEUES 1-\d+ of 21 +SIZE +LATENCY +STATE`, text)
	require.Contains(t, text, "queue_00")
	require.Regexp(t, `PROCESSES 5 +BUSY +STATE +VERSION +BEAT`, text)
	require.Regexp(t, `worker-0\.example\.internal:1000:0c3472b4ef2f +6/10 +running +7\.3\.10 +3\.0s`, text)
	require.NotContains(t, text, "TAG", "the identity is worth more than the tag")
	require.Regexp(t, `BUSY 1-\d+ of 30 +QUEUE +RUNNING +PROCESS`, text)
	require.Regexp(t, `UserMailer +mail +1m00s +worker-1\.example\.in…`, text)
	require.Equal(t, "tab ↑↓  p: pause/unpause  Q: quiet  r: refresh  q: quit", strings.TrimRight(lines[23], " "))
}

// Every size from tiny to huge: the layout fills the screen, never wider
// than it, and keeps the cursor's row in view.
func TestRenderDegradesGracefully(t *testing.T) {
	t.Parallel()
	for _, size := range [][2]int{{80, 24}, {30, 8}, {40, 12}, {60, 15}, {79, 23}, {100, 40}, {200, 60}, {80, 10}} {
		w, h := size[0], size[1]
		st := state(bigSnapshot())
		st.Selected[paneQueues] = "queue_15"
		lines := checkFits(t, Render(st, w, h, false), w, h)
		text := strings.Join(lines, "\n")
		require.Contains(t, text, "QUEUES", "%dx%d", w, h)
		require.Contains(t, text, "queue_15", "%dx%d: the selected queue stays in view", w, h)
	}
	// Too small to show a list: says so, in one line.
	for _, size := range [][2]int{{29, 24}, {80, 7}, {10, 3}} {
		out := Render(state(bigSnapshot()), size[0], size[1], false)
		require.NotContains(t, out, "\n")
		require.LessOrEqual(t, ansi.StringWidth(out), size[0])
	}
	require.Equal(t, "need 30x8, have 40x7", Render(state(bigSnapshot()), 40, 7, false))
}

// Narrow screens drop the least useful columns first.
func TestRenderDropsColumns(t *testing.T) {
	t.Parallel()
	lines := checkFits(t, Render(state(bigSnapshot()), 50, 24, false), 50, 24)
	text := strings.Join(lines, "\n")
	require.NotContains(t, text, "TAG")
	require.NotContains(t, text, "JID")
	require.Contains(t, text, "BUSY")
	require.Contains(t, text, "SIZE")
}

func TestRenderEmptyAndOutage(t *testing.T) {
	t.Parallel()
	empty := &Snapshot{At: now}
	st := state(bigSnapshot())
	st.Snap = empty
	text := strings.Join(checkFits(t, Render(st, 80, 24, false), 80, 24), "\n")
	require.Contains(t, text, "no queues")
	require.Contains(t, text, "no live process")
	require.Contains(t, text, "no job running")

	// Reads failing: the last figures stay, under a banner that says since
	// when.
	st = state(bigSnapshot())
	st.Now = now.Add(12 * time.Second)
	st.Err = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	st.ErrSince = now.Add(2 * time.Second)
	text = strings.Join(checkFits(t, Render(st, 80, 24, false), 80, 24), "\n")
	require.Contains(t, text, "no answer from Redis for 10s, retrying; figures from "+now.Local().Format("15:04:05"))
	require.Contains(t, text, "queue_00")
	// Before the first read.
	st.Snap = nil
	text = strings.Join(checkFits(t, Render(st, 80, 24, false), 80, 24), "\n")
	require.Contains(t, text, "no answer from Redis for 10s, retrying: dial tcp")
}

// Printed once (height 0): every row, no key help, no trailing spaces.
func TestRenderOnce(t *testing.T) {
	t.Parallel()
	st := state(bigSnapshot())
	st.Interval = 0
	out := Render(st, 120, 0, true)
	require.Equal(t, out, ansi.Strip(out), "plain: no escape sequences")
	lines := strings.Split(out, "\n")
	require.Len(t, lines, 1+2+(1+21)+(1+5)+(1+30))
	for _, l := range lines {
		require.Equal(t, strings.TrimRight(l, " "), l)
		require.LessOrEqual(t, ansi.StringWidth(l), 120)
	}
	require.Contains(t, out, "QUEUES 21 ")
	require.NotContains(t, out, "quit")
}

func TestRates(t *testing.T) {
	t.Parallel()
	a := &Snapshot{At: now, Processed: 100, Failed: 10}
	b := &Snapshot{At: now.Add(2 * time.Second), Processed: 150, Failed: 11}
	require.Equal(t, Rates{Processed: 25, Failed: 0.5, OK: true}, RatesBetween(a, b))
	require.False(t, RatesBetween(nil, b).OK)
	// A reset counter.
	require.Equal(t, Rates{OK: true}, RatesBetween(b, &Snapshot{At: now.Add(3 * time.Second)}))
}

// fakeSource records actions.
type fakeSource struct {
	mu      sync.Mutex
	snap    *Snapshot
	err     error
	paused  map[string]bool
	quieted []string
}

// Snapshot returns snap with the pauses set since.
func (f *fakeSource) Snapshot(context.Context) (*Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.snap == nil {
		return nil, f.err
	}
	c := *f.snap
	c.Queues = slices.Clone(f.snap.Queues)
	for i := range c.Queues {
		if p, ok := f.paused[c.Queues[i].Name]; ok {
			c.Queues[i].Paused = p
		}
	}
	return &c, f.err
}

func (f *fakeSource) SetPaused(_ context.Context, q string, p bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused[q] = p
	return nil
}

func (f *fakeSource) Quiet(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quieted = append(f.quieted, id)
	return nil
}

// run feeds msg to m and the messages of the commands it returns, as the
// program would (ticks excepted), and returns the model.
func run(t *testing.T, m *Model, msg tea.Msg) {
	t.Helper()
	queue := []tea.Msg{msg}
	for len(queue) > 0 {
		msg, queue = queue[0], queue[1:]
		_, cmd := m.Update(msg)
		if cmd == nil {
			continue
		}
		switch out := cmd().(type) {
		case tickMsg, nil:
		case tea.QuitMsg:
			queue = append(queue, out)
		default:
			queue = append(queue, out)
		}
	}
}

func key(s string) tea.Msg {
	switch s {
	case "tab":
		return tea.KeyPressMsg{Code: tea.KeyTab}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	}
	return tea.KeyPressMsg{Code: rune(s[0]), Text: s}
}

func screen(m *Model) string { return ansi.Strip(m.View().Content) }

func TestModelKeys(t *testing.T) {
	t.Parallel()
	src := &fakeSource{snap: bigSnapshot(), paused: map[string]bool{}}
	m := NewModel(Config{Source: src, Title: "test", Now: func() time.Time { return now }})
	run(t, m, tea.WindowSizeMsg{Width: 80, Height: 24})
	require.Contains(t, screen(m), "reading test …")
	run(t, m, m.Init()())
	require.Contains(t, screen(m), "queue_00")

	// p pauses the selected queue (queue_00, the first); on queue_03,
	// which is paused, it unpauses.
	run(t, m, key("p"))
	require.Equal(t, map[string]bool{"queue_00": true}, src.paused)
	require.Contains(t, screen(m), "paused queue queue_00 for gojob processes")
	for range 3 {
		run(t, m, key("j"))
	}
	run(t, m, key("p"))
	require.Equal(t, map[string]bool{"queue_00": true, "queue_03": false}, src.paused)
	// p again toggles what the screen shows, also when a read that began
	// before the first p comes back after it (showing the queue as it
	// was): the model reads again, and keeps what it set meanwhile.
	_, read := m.Update(tickMsg{})
	stale := read()
	run(t, m, key("p"))
	require.True(t, src.paused["queue_03"], "p paused queue_03 again")
	run(t, m, stale)
	require.Regexp(t, `queue_03 .*paused`, screen(m))
	run(t, m, key("p"))
	require.False(t, src.paused["queue_03"], "p toggled the pause the screen showed")

	// Q on the queues: nothing to quiet.
	run(t, m, key("Q"))
	require.Contains(t, screen(m), "Q quiets the selected process: tab to the processes")
	// tab to the processes, down to the second; Q asks, n cancels.
	run(t, m, key("tab"))
	run(t, m, key("down"))
	run(t, m, key("Q"))
	require.Contains(t, screen(m), "Quiet worker-1.example.internal:1001:0c3472b4ef2f?")
	run(t, m, key("n"))
	require.Empty(t, src.quieted)
	require.Contains(t, screen(m), "not quieted")
	run(t, m, key("p"))
	require.Contains(t, screen(m), "p pauses the selected queue: tab to the queues")
	run(t, m, key("Q"))
	run(t, m, key("y"))
	require.Equal(t, []string{"worker-1.example.internal:1001:0c3472b4ef2f"}, src.quieted)
	require.Contains(t, screen(m), "sent TSTP to worker-1.example.internal:1001:0c3472b4ef2f")
	// The quiet one says so rather than asking.
	run(t, m, key("j"))
	run(t, m, key("Q"))
	require.Contains(t, screen(m), "is already quiet")

	// The selection follows the name while the list changes.
	src.mu.Lock()
	s := bigSnapshot()
	s.Processes = s.Processes[2:]
	src.snap = s
	src.mu.Unlock()
	run(t, m, key("r"))
	require.Equal(t, "worker-2.example.internal:1002:0c3472b4ef2f", m.sel[paneProcesses])

	// A failing read keeps the figures and shows the outage.
	src.mu.Lock()
	src.err = errors.New("connection refused")
	src.mu.Unlock()
	run(t, m, key("r"))
	require.Contains(t, screen(m), "no answer from Redis")
	require.Contains(t, screen(m), "queue_00")

	for _, k := range []string{"q", "ctrl+c"} {
		_, cmd := m.Update(key(k))
		require.NotNil(t, cmd)
		require.IsType(t, tea.QuitMsg{}, cmd(), k)
	}
}
