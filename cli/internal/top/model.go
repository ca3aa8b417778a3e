package top

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	tea "charm.land/bubbletea/v2"
)

// Config configures a Model.
type Config struct {
	// Source reads the cluster and acts on it.
	Source Source
	// Title names what is watched (a redacted Redis URL).
	Title string
	// Interval is the time between the end of a read and the next (1 s
	// when zero).
	Interval time.Duration
	// Timeout bounds one read or action (5 s when zero): a Redis that
	// does not answer is shown as an outage.
	Timeout time.Duration
	// Context ends reads and actions when cancelled.
	Context context.Context
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// pane is a list the cursor can be in.
type pane int

const (
	paneQueues pane = iota
	paneProcesses
)

// Rates are per-second rates from two snapshots.
type Rates struct {
	Processed, Failed float64
	// OK is false until two snapshots were read.
	OK bool
}

// RatesBetween computes the rates from prev to cur.
func RatesBetween(prev, cur *Snapshot) Rates {
	if prev == nil || cur == nil {
		return Rates{}
	}
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 {
		return Rates{}
	}
	// A reset counter (Web UI's "reset stats") reads as 0, not negative.
	return Rates{Processed: max(0, float64(cur.Processed-prev.Processed)/dt),
		Failed: max(0, float64(cur.Failed-prev.Failed)/dt), OK: true}
}

// Model is the dashboard's Bubble Tea model.
type Model struct {
	cfg           Config
	width, height int

	snap  *Snapshot
	rates Rates
	// err is the last read's error, errAt when reads started failing.
	err   error
	errAt time.Time

	focus pane
	// sel holds the selected queue name and process identity: the cursor
	// follows a name, not a row, while the lists change.
	sel [2]string
	// confirm is the identity of a process waiting for y to be quieted.
	confirm string

	status   string
	statusAt time.Time
	fetching bool
	// acted counts the pauses and unpauses done; set holds what they set
	// (queue → paused) until a read that started after them comes back:
	// a read under way when p was pressed shows the queue as it was, and
	// the next p must toggle what the screen says, not what that read saw.
	acted int
	set   map[string]bool
}

// NewModel returns a model.
func NewModel(cfg Config) *Model {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Model{cfg: cfg, width: 80, height: 24}
}

// Messages.
type (
	snapshotMsg struct {
		snap *Snapshot
		err  error
		// acted is Model.acted when the read started.
		acted int
	}
	tickMsg   struct{}
	actionMsg struct {
		text string
		err  error
		// pause: the action paused (paused) or unpaused queue.
		pause  bool
		queue  string
		paused bool
	}
)

// Init starts the first read.
func (m *Model) Init() tea.Cmd { return m.fetch() }

// fetch reads a snapshot unless a read is under way.
func (m *Model) fetch() tea.Cmd {
	if m.fetching {
		return nil
	}
	m.fetching = true
	src, parent, timeout, acted := m.cfg.Source, m.cfg.Context, m.cfg.Timeout, m.acted
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, timeout)
		defer cancel()
		snap, err := src.Snapshot(ctx)
		return snapshotMsg{snap, err, acted}
	}
}

// act runs an action on the cluster and reports it.
func (m *Model) act(done string, f func(ctx context.Context) error) tea.Cmd {
	parent, timeout := m.cfg.Context, m.cfg.Timeout
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, timeout)
		defer cancel()
		if err := f(ctx); err != nil {
			return actionMsg{err: err}
		}
		return actionMsg{text: done}
	}
}

// Update handles a message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case snapshotMsg:
		m.fetching = false
		m.apply(msg)
		if msg.err == nil && msg.acted < m.acted {
			return m, m.fetch() // read before a pause: read again now
		}
		interval := m.cfg.Interval
		return m, tea.Tick(interval, func(time.Time) tea.Msg { return tickMsg{} })
	case tickMsg:
		return m, m.fetch()
	case actionMsg:
		if msg.err != nil {
			m.setStatus("failed: " + msg.err.Error())
		} else {
			m.setStatus(msg.text)
			if msg.pause {
				m.acted++
				if m.set == nil {
					m.set = map[string]bool{}
				}
				m.set[msg.queue] = msg.paused
				m.snap = m.withSet(m.snap)
			}
		}
		return m, m.fetch()
	case tea.KeyPressMsg:
		return m, m.key(msg.String())
	}
	return m, nil
}

// apply takes a read's result.
func (m *Model) apply(msg snapshotMsg) {
	if msg.err != nil {
		if m.err == nil {
			m.errAt = m.cfg.Now()
		}
		m.err = msg.err
		return
	}
	m.err = nil
	m.rates = RatesBetween(m.snap, msg.snap)
	if msg.acted < m.acted {
		m.snap = m.withSet(msg.snap)
	} else {
		m.snap, m.set = msg.snap, nil
	}
	m.keepSelection()
}

// withSet returns snap with the pauses and unpauses done since it was
// read (a copy; snap itself is left alone).
func (m *Model) withSet(snap *Snapshot) *Snapshot {
	if snap == nil || len(m.set) == 0 {
		return snap
	}
	c := *snap
	c.Queues = slices.Clone(snap.Queues)
	for i := range c.Queues {
		if p, ok := m.set[c.Queues[i].Name]; ok {
			c.Queues[i].Paused = p
		}
	}
	return &c
}

// keepSelection points the cursors at rows that exist: the same name when
// it is still listed, else the first row.
func (m *Model) keepSelection() {
	names := m.names()
	for p := range names {
		found := false
		for _, n := range names[p] {
			found = found || n == m.sel[p]
		}
		if !found {
			m.sel[p] = ""
			if len(names[p]) > 0 {
				m.sel[p] = names[p][0]
			}
		}
	}
}

// names lists the queue names and process identities in display order.
func (m *Model) names() [2][]string {
	var out [2][]string
	if m.snap == nil {
		return out
	}
	for _, q := range m.snap.Queues {
		out[paneQueues] = append(out[paneQueues], q.Name)
	}
	for _, p := range m.snap.Processes {
		out[paneProcesses] = append(out[paneProcesses], p.Identity)
	}
	return out
}

func (m *Model) setStatus(s string) {
	m.status, m.statusAt = s, m.cfg.Now()
}

// key handles a key press.
func (m *Model) key(k string) tea.Cmd {
	if m.confirm != "" {
		id := m.confirm
		m.confirm = ""
		if k != "y" && k != "Y" {
			m.setStatus("not quieted")
			return nil
		}
		src := m.cfg.Source
		return m.act("sent TSTP to "+id+" (it goes quiet at its next heartbeat)", func(ctx context.Context) error {
			err := src.Quiet(ctx, id)
			if errors.Is(err, ErrNoProcess) {
				return fmt.Errorf("%s is gone", id)
			}
			return err
		})
	}
	switch k {
	case "q", "ctrl+c":
		return tea.Quit
	case "tab", "shift+tab", "left", "right", "h", "l":
		m.focus = 1 - m.focus
	case "down", "j":
		m.move(1)
	case "up", "k":
		m.move(-1)
	case "home", "g":
		m.move(-1 << 30)
	case "end", "G":
		m.move(1 << 30)
	case "r":
		return m.fetch()
	case "p":
		q, ok := m.selectedQueue()
		if m.focus != paneQueues || !ok {
			m.setStatus("p pauses the selected queue: tab to the queues")
			return nil
		}
		src, pause := m.cfg.Source, !q.Paused
		verb := "paused"
		if !pause {
			verb = "unpaused"
		}
		cmd := m.act(verb+" queue "+q.Name+" for gojob processes", func(ctx context.Context) error {
			return src.SetPaused(ctx, q.Name, pause)
		})
		name := q.Name
		return func() tea.Msg {
			msg := cmd().(actionMsg)
			msg.pause, msg.queue, msg.paused = true, name, pause
			return msg
		}
	case "Q", "shift+q":
		p, ok := m.selectedProcess()
		switch {
		case m.focus != paneProcesses || !ok:
			m.setStatus("Q quiets the selected process: tab to the processes")
		case p.Embedded:
			m.setStatus(p.Identity + " is embedded and takes no signals")
		case p.Quiet:
			m.setStatus(p.Identity + " is already quiet")
		default:
			m.confirm = p.Identity
		}
	}
	return nil
}

// move moves the cursor of the focused pane by d rows.
func (m *Model) move(d int) {
	names := m.names()[m.focus]
	if len(names) == 0 {
		return
	}
	i := 0
	for k, n := range names {
		if n == m.sel[m.focus] {
			i = k
		}
	}
	i = min(max(i+d, 0), len(names)-1)
	m.sel[m.focus] = names[i]
}

func (m *Model) selectedQueue() (Queue, bool) {
	if m.snap == nil {
		return Queue{}, false
	}
	return first(m.snap.Queues, func(q Queue) bool { return q.Name == m.sel[paneQueues] })
}

func (m *Model) selectedProcess() (Process, bool) {
	if m.snap == nil {
		return Process{}, false
	}
	return first(m.snap.Processes, func(p Process) bool { return p.Identity == m.sel[paneProcesses] })
}

// first returns the first of items that match accepts.
func first[T any](items []T, match func(T) bool) (T, bool) {
	if i := slices.IndexFunc(items, match); i >= 0 {
		return items[i], true
	}
	var zero T
	return zero, false
}

// View renders the model in the alternate screen.
func (m *Model) View() tea.View {
	v := tea.NewView(Render(m.state(), m.width, m.height, false))
	v.AltScreen = true
	v.WindowTitle = "gojob top"
	return v
}

// state is what Render needs.
func (m *Model) state() State {
	st := State{Title: m.cfg.Title, Interval: m.cfg.Interval, Now: m.cfg.Now(), Snap: m.snap, Rates: m.rates,
		Err: m.err, ErrSince: m.errAt, Focus: m.focus, Selected: m.sel}
	switch {
	case m.confirm != "":
		st.Prompt = "Quiet " + m.confirm + "? It stops fetching until restarted. y: quiet, any other key: cancel"
	case m.status != "" && st.Now.Sub(m.statusAt) < 5*time.Second:
		st.Prompt = m.status
	}
	return st
}
