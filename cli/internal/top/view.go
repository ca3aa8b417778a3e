package top

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/gojob/gojob/internal/numfmt"
)

// State is what Render shows.
type State struct {
	// Title names the Redis watched.
	Title    string
	Interval time.Duration
	Now      time.Time
	// Snap is the last snapshot read (nil before the first).
	Snap  *Snapshot
	Rates Rates
	// Err is the last read's error (the snapshot is then older), since
	// ErrSince.
	Err      error
	ErrSince time.Time
	// Focus and Selected are the cursor: the pane and, per pane, the
	// selected queue name and process identity.
	Focus    pane
	Selected [2]string
	// Prompt replaces the key help in the last line.
	Prompt string
}

// Smallest layout that still shows a list.
const (
	minWidth  = 30
	minHeight = 8
)

// keyHelp is the last line's help, shortest last.
var keyHelp = []string{
	"tab: queues/processes  ↑↓: select  p: pause/unpause queue  Q: quiet process  r: refresh  q: quit",
	"tab ↑↓  p: pause/unpause  Q: quiet  r: refresh  q: quit",
	"p pause  Q quiet  q quit",
}

type styles struct {
	header, title, focused, selected, warn, faint lipgloss.Style
}

func newStyles(plain bool) styles {
	if plain {
		s := lipgloss.NewStyle()
		return styles{s, s, s, s, s, s}
	}
	base := lipgloss.NewStyle()
	return styles{
		header:   base.Bold(true),
		title:    base.Bold(true).Underline(true),
		focused:  base.Bold(true).Reverse(true),
		selected: base.Reverse(true),
		warn:     base.Bold(true).Foreground(lipgloss.Color("1")),
		faint:    base.Faint(true),
	}
}

// Render lays s out in width columns and height rows, the last of which
// tells the keys (height 0: every row of every list and no keys, for a
// snapshot printed once). plain leaves out styles.
// No line is wider than width; a list that does not fit shows the rows
// around its cursor and how many there are.
func Render(s State, width, height int, plain bool) string {
	if width < minWidth || (height > 0 && height < minHeight) {
		return fit(fmt.Sprintf("need %dx%d, have %dx%d", minWidth, minHeight, width, height), width)
	}
	st := newStyles(plain)
	var top []string
	left := "gojob top  " + s.Title
	right := s.Now.Local().Format("15:04:05")
	if s.Interval > 0 {
		right += "  every " + s.Interval.String()
	}
	if height == 0 {
		top = append(top, fit(left+"  "+s.Now.Local().Format(time.RFC3339), width))
	} else {
		top = append(top, st.header.Render(spread(left, right, width)))
	}
	if s.Snap != nil {
		top = append(top, flow(statItems(s), width, 3)...)
	}
	if s.Err != nil {
		msg := fmt.Sprintf("no answer from Redis for %s, retrying", ago(s.Now.Sub(s.ErrSince)))
		if s.Snap != nil {
			msg += "; figures from " + s.Snap.At.Local().Format("15:04:05")
		}
		msg += ": " + firstLine(s.Err.Error())
		top = append(top, st.warn.Render(fit(msg, width)))
	}
	bottom := s.Prompt
	if bottom == "" {
		bottom = keyHelp[len(keyHelp)-1]
		for _, h := range keyHelp {
			if ansi.StringWidth(h) <= width {
				bottom = h
				break
			}
		}
	}
	bottomLine := st.faint.Render(fit(bottom, width))
	if s.Prompt != "" {
		bottomLine = st.header.Render(fit(bottom, width))
	}
	var body []string
	if s.Snap == nil {
		if s.Err == nil {
			body = append(body, fit("reading "+s.Title+" …", width))
		}
	} else {
		avail := -1
		if height > 0 {
			avail = height - len(top) - 1
		}
		body = sections(s, st, width, avail, height == 0)
	}
	lines := append(top, body...)
	if height == 0 {
		// A snapshot printed once: no keys to tell, no padding.
		for i, l := range lines {
			lines[i] = strings.TrimRight(l, " ")
		}
		return strings.Join(lines, "\n")
	}
	for len(lines) < height-1 {
		lines = append(lines, "")
	}
	lines = append(lines[:height-1], bottomLine)
	return strings.Join(lines, "\n")
}

// statItems are the counters, in the order they are laid out.
func statItems(s State) []string {
	sn := s.Snap
	rate := func(r float64) string {
		if !s.Rates.OK {
			return ""
		}
		return fmt.Sprintf(" (%s/s)", strconv.FormatFloat(r, 'f', 1, 64))
	}
	var conc int64
	for _, p := range sn.Processes {
		conc += p.Concurrency
	}
	return []string{
		"processed " + numfmt.Int(sn.Processed) + rate(s.Rates.Processed),
		"failed " + numfmt.Int(sn.Failed) + rate(s.Rates.Failed),
		"busy " + numfmt.Int(sn.Busy) + "/" + numfmt.Int(conc),
		"enqueued " + numfmt.Int(sn.Enqueued),
		"scheduled " + numfmt.Int(sn.Scheduled),
		"retries " + numfmt.Int(sn.Retries),
		"dead " + numfmt.Int(sn.Dead),
	}
}

// flow lays items on lines of width, three spaces apart, in at most max
// lines.
func flow(items []string, width, maxLines int) []string {
	var lines []string
	cur := ""
	for _, it := range items {
		switch {
		case cur == "":
			cur = it
		case ansi.StringWidth(cur)+3+ansi.StringWidth(it) <= width:
			cur += "   " + it
		default:
			lines = append(lines, fit(cur, width))
			cur = it
		}
	}
	if cur != "" {
		lines = append(lines, fit(cur, width))
	}
	if len(lines) > maxLines {
		lines = lines[:maxLines]
	}
	return lines
}

// column is a table column.
type column struct {
	title string
	width int // 0: the flexible column, which takes what is left
	min   int // the flexible column's least width
	right bool
	drop  int // dropped when the table is too narrow: highest first; 0 never
	want  int // the flexible column's widest cell (set from the rows)
}

// maxWant caps how much room a flexible column asks for.
const maxWant = 48

// list is one section: a table with a title.
type list struct {
	name   string
	cols   []column
	rows   [][]string
	sel    int // selected row, -1 for none
	active bool
	empty  string
}

// sections lays out the queues, processes and busy jobs in avail rows
// (-1: all). compact makes the first column no wider than its cells.
func sections(s State, st styles, width, avail int, compact bool) []string {
	lists := []*list{queueList(s), processList(s), jobList(s)}
	// Each list gets its title and one row, in order, while they fit;
	// then rows go one at a time to the lists that have more, in order.
	shown := make([]int, len(lists))
	need := func(l *list) int { return max(1, len(l.rows)) }
	if avail < 0 {
		for i, l := range lists {
			shown[i] = need(l)
		}
	} else {
		left := avail
		for i := range lists {
			if left < 2 {
				lists = lists[:i]
				shown = shown[:i]
				break
			}
			shown[i] = 1
			left -= 2
		}
		for left > 0 {
			gave := false
			for i, l := range lists {
				if left > 0 && shown[i] < need(l) {
					shown[i]++
					left--
					gave = true
				}
			}
			if !gave {
				break
			}
		}
	}
	var out []string
	for i, l := range lists {
		out = append(out, l.render(st, width, shown[i], compact)...)
	}
	return out
}

// render draws the title row and n rows: those around the selected row
// when not all fit.
func (l *list) render(st styles, width, n int, compact bool) []string {
	for _, r := range l.rows {
		l.cols[0].want = max(l.cols[0].want, ansi.StringWidth(r[0]))
	}
	widths := layoutColumns(l.cols, width)
	if compact {
		widths[0] = min(widths[0], max(l.cols[0].min, l.cols[0].want, ansi.StringWidth(l.name)+12))
	}
	first := 0
	if len(l.rows) > n && l.sel >= n {
		first = min(l.sel-n+1, len(l.rows)-n)
	}
	count := strconv.Itoa(len(l.rows))
	if len(l.rows) > n {
		count = fmt.Sprintf("%d-%d of %d", first+1, first+n, len(l.rows))
	}
	title := make([]string, len(l.cols))
	for i, c := range l.cols {
		title[i] = c.title
	}
	title[0] = l.name + " " + count
	titleStyle := st.title
	if l.active {
		titleStyle = st.focused
	}
	out := []string{titleStyle.Render(row(title, l.cols, widths, width))}
	if len(l.rows) == 0 {
		return append(out, st.faint.Render(fit("  "+l.empty, width)))
	}
	for i := first; i < first+n && i < len(l.rows); i++ {
		line := row(l.rows[i], l.cols, widths, width)
		if i == l.sel {
			if l.active {
				line = st.selected.Render(line)
			} else {
				line = st.header.Render(line)
			}
		}
		out = append(out, line)
	}
	return out
}

// layoutColumns gives each column its width in a line of width, 0 for a
// dropped column: columns go, highest drop first, until the rest fit with
// the flexible column as wide as its widest cell (up to maxWant, at least
// its min); it then takes what is left.
func layoutColumns(cols []column, width int) []int {
	widths := make([]int, len(cols))
	on := make([]bool, len(cols))
	for i := range cols {
		on[i] = true
	}
	total := func() int {
		t, n := 0, 0
		for i, c := range cols {
			if on[i] {
				t += max(c.width, c.min, min(c.want, maxWant))
				n++
			}
		}
		return t + 2*(n-1)
	}
	for total() > width {
		drop := -1
		for i, c := range cols {
			if on[i] && c.drop > 0 && (drop < 0 || c.drop > cols[drop].drop) {
				drop = i
			}
		}
		if drop < 0 {
			break
		}
		on[drop] = false
	}
	rest := width
	n := 0
	for i, c := range cols {
		if on[i] {
			rest -= c.width
			n++
		}
	}
	rest -= 2 * (n - 1)
	for i, c := range cols {
		if !on[i] {
			continue
		}
		widths[i] = c.width
		if c.width == 0 {
			widths[i] = max(rest, c.min)
		}
	}
	return widths
}

// row draws cells in their columns, two spaces apart, cut to width.
func row(cells []string, cols []column, widths []int, width int) string {
	var b strings.Builder
	for i, c := range cols {
		w := widths[i]
		if w == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("  ")
		}
		cell := ansi.Truncate(cells[i], w, "…")
		pad := strings.Repeat(" ", w-ansi.StringWidth(cell))
		if c.right {
			b.WriteString(pad + cell)
		} else {
			b.WriteString(cell + pad)
		}
	}
	return fit(b.String(), width)
}

func queueList(s State) *list {
	l := &list{name: "QUEUES", active: s.Focus == paneQueues, sel: -1, empty: "no queues",
		cols: []column{{title: "", min: 10}, {title: "SIZE", width: 11, right: true}, {title: "LATENCY", width: 8, right: true},
			{title: "STATE", width: 6}}}
	for i, q := range s.Snap.Queues {
		state := ""
		if q.Paused {
			state = "paused"
		}
		lat := "?"
		if q.Latency >= 0 {
			lat = dur(q.Latency)
		}
		if q.Size == 0 {
			lat = "-"
		}
		l.rows = append(l.rows, []string{q.Name, numfmt.Int(q.Size), lat, state})
		if q.Name == s.Selected[paneQueues] {
			l.sel = i
		}
	}
	return l
}

func processList(s State) *list {
	l := &list{name: "PROCESSES", active: s.Focus == paneProcesses, sel: -1, empty: "no live process",
		cols: []column{{title: "", min: 16}, {title: "BUSY", width: 7, right: true}, {title: "STATE", width: 7},
			{title: "VERSION", width: 7, drop: 2}, {title: "BEAT", width: 5, right: true, drop: 3},
			{title: "TAG", width: 10, drop: 4}}}
	for i, p := range s.Snap.Processes {
		state := "running"
		if p.Quiet {
			state = "quiet"
		}
		version := p.Version
		if version == "" {
			version = "-"
		}
		beat := "-"
		if !p.Beat.IsZero() {
			beat = dur(max(0, s.Now.Sub(p.Beat)))
		}
		l.rows = append(l.rows, []string{p.Identity, numfmt.Int(p.Busy) + "/" + numfmt.Int(p.Concurrency), state, version, beat, p.Tag})
		if p.Identity == s.Selected[paneProcesses] {
			l.sel = i
		}
	}
	return l
}

func jobList(s State) *list {
	l := &list{name: "BUSY", sel: -1, empty: "no job running",
		cols: []column{{title: "", min: 12}, {title: "QUEUE", width: 12}, {title: "RUNNING", width: 8, right: true},
			{title: "PROCESS", width: 20, drop: 2}, {title: "JID", width: 24, drop: 3}}}
	for _, j := range s.Snap.Jobs {
		running := "-"
		if !j.RunAt.IsZero() {
			running = dur(max(0, s.Now.Sub(j.RunAt)))
		} else if !j.StartedAfter.IsZero() {
			running = "<" + dur(max(0, s.Now.Sub(j.StartedAfter)))
		}
		l.rows = append(l.rows, []string{j.Class, j.Queue, running, j.Identity, j.JID})
	}
	return l
}

// spread puts left and right on one line of width (right is dropped when
// both do not fit).
func spread(left, right string, width int) string {
	gap := width - ansi.StringWidth(left) - ansi.StringWidth(right)
	if gap < 2 {
		return fit(left, width)
	}
	return left + strings.Repeat(" ", gap) + right
}

// fit cuts s to width.
func fit(s string, width int) string {
	if ansi.StringWidth(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// dur formats a duration in at most two units: 850ms, 4.2s, 3m05s, 2h07m,
// 3d04h.
func dur(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// ago is dur for a past moment, whole seconds.
func ago(d time.Duration) string {
	if d < time.Second {
		return "0s"
	}
	return dur(d.Truncate(time.Second))
}
