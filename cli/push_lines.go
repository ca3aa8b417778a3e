package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/ordered"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// `gojob push -` reads one job per line of stdin (docs/cli.md "gojob push
// -"). The whole input is read and checked before the first push: a bad
// line anywhere pushes nothing, so a fixed input can be run again as it
// is. The jobs are then pushed in order, pushBulkSize per round trip
// (Client.PushBulk, Sidekiq's push_bulk size).

// pushLineFields are the fields a line may have: the payload keys of the
// options `gojob push` takes as flags.
var pushLineFields = []string{"class", "args", "queue", "retry", "at", "in", "expires_in", "jid", "unique_for", "unique_until",
	"timeout", "heartbeat_timeout", "key", "score", "batch"}

// pushBulkSize is how many lines go to Redis per round trip.
const pushBulkSize = 1000

// maxLineErrors is how many bad lines push - reports before it stops
// reading.
const maxLineErrors = 20

// pushLine is one checked line.
type pushLine struct {
	n     int // 1-based line number
	job   *wire.Job
	opts  *sidekiq.PushOpts
	key   string
	score *float64
	batch string
}

// pushInput is push -'s input, checked: the lines' bytes in one buffer,
// parsed again when pushed, so that memory grows with the input's size
// rather than with its parsed jobs.
type pushInput struct {
	base  *pushSpec
	buf   []byte
	lines []lineRef
	// classes are the lines' classes; batches the first line of each
	// batch a line names.
	classes map[string]bool
	batches map[string]int
}

// lineRef is where a line is in pushInput.buf.
type lineRef struct{ n, start, end int }

// len is the number of jobs.
func (in *pushInput) len() int { return len(in.lines) }

// line parses the i-th job again (it was checked when read).
func (in *pushInput) line(i int) (pushLine, error) {
	ref := in.lines[i]
	l, err := parsePushLine(in.buf[ref.start:ref.end], in.base)
	if err != nil {
		return l, fmt.Errorf("line %d: %w", ref.n, err)
	}
	l.n = ref.n
	return l, nil
}

// readPushLines reads and checks every line of r, each laid over base
// (the command's flags). Blank lines are skipped. It returns the input, or
// the errors of the bad lines (at most maxLineErrors, each naming its
// line).
func readPushLines(r io.Reader, base *pushSpec) (*pushInput, []error) {
	br := bufio.NewReaderSize(r, 1<<16)
	in := &pushInput{base: base, classes: map[string]bool{}, batches: map[string]int{}}
	var errs []error
	for n := 1; ; n++ {
		raw, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: read the rest of it.
			long := append([]byte(nil), raw...)
			for err == bufio.ErrBufferFull {
				raw, err = br.ReadSlice('\n')
				long = append(long, raw...)
			}
			raw = long
		}
		if line := bytes.TrimSpace(raw); len(line) > 0 {
			if l, lerr := parsePushLine(line, base); lerr != nil {
				errs = append(errs, fmt.Errorf("line %d: %w", n, lerr))
				if len(errs) == maxLineErrors {
					return nil, append(errs, fmt.Errorf("stopped reading at line %d after %d bad lines", n, maxLineErrors))
				}
			} else if len(errs) == 0 {
				start := len(in.buf)
				in.buf = append(in.buf, line...)
				in.lines = append(in.lines, lineRef{n, start, len(in.buf)})
				in.classes[l.job.Class()] = true
				if _, seen := in.batches[l.batch]; l.batch != "" && !seen {
					in.batches[l.batch] = n
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, append(errs, fmt.Errorf("line %d: %w", n, err))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return in, nil
}

// parsePushLine reads one line: a JSON object of pushLineFields.
func parsePushLine(raw []byte, base *pushSpec) (pushLine, error) {
	m, err := rubyjson.ParseObject(bytes.TrimSpace(raw))
	if err != nil {
		return pushLine{}, fmt.Errorf("not a JSON object: %w", err)
	}
	s := *base
	s.fromLine = true
	s.args = nil
	for i := range m.Len() {
		k, v := m.At(i)
		if err := s.setField(k, v); err != nil {
			return pushLine{}, err
		}
	}
	if s.class == "" {
		return pushLine{}, errors.New(`"class" is required`)
	}
	job, opts, err := s.build()
	if err != nil {
		return pushLine{}, err
	}
	return pushLine{job: job, opts: opts, key: s.key, score: s.score, batch: s.batch}, nil
}

// setField sets the option of a line's field.
func (s *pushSpec) setField(k string, v rubyjson.Value) error {
	str := func(p *string) error {
		t, ok := v.Str()
		if !ok {
			return fmt.Errorf("%q must be a string, not %s", k, v.Encode())
		}
		*p = t
		return nil
	}
	num := func(p **float64) error {
		f, ok := v.Float()
		if !ok {
			return fmt.Errorf("%q must be a number, not %s", k, v.Encode())
		}
		*p = &f
		return nil
	}
	switch k {
	case "class":
		return str(&s.class)
	case "args":
		a, ok := v.Array()
		if !ok {
			return fmt.Errorf(`"args" must be an array, not %s`, v.Encode())
		}
		s.args = a
	case "queue":
		return str(&s.queue)
	case "retry":
		if b, ok := v.Bool(); ok {
			s.retry = fmt.Sprint(b)
		} else if n, ok := v.Int(); ok && v.Kind() == rubyjson.Integer && n >= 0 {
			s.retry = fmt.Sprint(n)
		} else {
			return fmt.Errorf(`"retry" must be true, false or a number of retries, not %s`, v.Encode())
		}
	case "at":
		if _, ok := v.Float(); ok {
			s.at = string(v.Encode())
		} else if err := str(&s.at); err != nil {
			return fmt.Errorf(`"at" must be epoch seconds or an RFC 3339 time, not %s`, v.Encode())
		}
	case "in":
		if f, ok := v.Float(); ok && f >= 0 {
			s.in = time.Duration(f * float64(time.Second))
		} else if t, ok := v.Str(); ok {
			d, err := time.ParseDuration(t)
			if err != nil || d < 0 {
				return fmt.Errorf(`"in" must be seconds or a duration such as "90s" or "2h", not %s`, v.Encode())
			}
			s.in = d
		} else {
			return fmt.Errorf(`"in" must be seconds or a duration such as "90s" or "2h", not %s`, v.Encode())
		}
	case "expires_in":
		if f, ok := v.Float(); ok && f >= 0 {
			s.expiresIn = time.Duration(f * float64(time.Second))
		} else if t, ok := v.Str(); ok {
			d, err := time.ParseDuration(t)
			if err != nil || d < 0 {
				return fmt.Errorf(`"expires_in" must be seconds or a duration such as "30m", not %s`, v.Encode())
			}
			s.expiresIn = d
		} else {
			return fmt.Errorf(`"expires_in" must be seconds or a duration such as "30m", not %s`, v.Encode())
		}
	case "jid":
		if err := str(&s.jid); err != nil || s.jid == "" {
			return fmt.Errorf(`"jid" must be a non-empty string, not %s`, v.Encode())
		}
	case "unique_for":
		return num(&s.uniqueFor)
	case "unique_until":
		return str(&s.uniqueUntil)
	case "timeout":
		return num(&s.timeout)
	case "heartbeat_timeout":
		return num(&s.hbTimeout)
	case "key":
		return str(&s.key)
	case "score":
		return num(&s.score)
	case "batch":
		return str(&s.batch)
	case "durable":
		return errors.New(`unknown field "durable": --durable makes every line's job durable`)
	default:
		return fmt.Errorf("unknown field %q (a line has %s)", k, strings.Join(pushLineFields, ", "))
	}
	return nil
}

// pushLinesReport is what push - did.
type pushLinesReport struct {
	Read       int      `json:"read"`
	Pushed     int      `json:"pushed"`
	Scheduled  int      `json:"scheduled"`
	Ordered    int      `json:"ordered"`
	Merged     int      `json:"merged"`
	Duplicates int      `json:"duplicates"`
	JIDs       []string `json:"jids"`
	// DuplicateLines are the lines a unique lock refused (at most 20).
	DuplicateLines []int `json:"duplicate_lines,omitempty"`
}

// pushLinesCheck is push -'s Before: the flags alone, with no line read.
func pushLinesCheck(c *ucli.Context) error {
	if c.NArg() > 1 {
		return ucli.Exit("push -: takes no arguments after - (each line has its class and args)", exitUsage)
	}
	if c.IsSet("batch") && c.String("batch") == "" {
		return ucli.Exit("push: --batch needs a BID", exitUsage)
	}
	if n := c.Int("bulk"); n < 1 || n > pushBulkSize {
		return ucli.Exit(fmt.Sprintf("push -: --bulk must be 1 to %d", pushBulkSize), exitUsage)
	}
	return nil
}

// pushLinesAction is `gojob push -`.
func pushLinesAction(ctx context.Context, e *adminEnv) error {
	in, errs := readPushLines(e.c.App.Reader, pushSpecFromFlags(e.c))
	if len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintln(e.c.App.ErrWriter, "push -:", err)
		}
		return ucli.Exit("push -: nothing pushed: fix the lines above", exitUsage)
	}
	stopTracing, err := setupTracing(ctx, newLogger(e.c.App.ErrWriter, false, "warn"), e.api.Client())
	if err != nil {
		return err
	}
	defer stopTracing()
	if e.c.Bool("durable") {
		d, err := openPushDurable(ctx, e.c, newLogger(e.c.App.ErrWriter, false, "warn"), slices.Sorted(maps.Keys(in.classes))...)
		if err != nil {
			return err
		}
		defer d.Close()
		e.api.Client().Extend(d)
	}
	p := &linePusher{e: e, rep: &pushLinesReport{Read: in.len(), JIDs: make([]string, in.len())}}
	if err := p.checkBatches(ctx, in.batches); err != nil {
		return err
	}
	bulk := e.c.Int("bulk")
	chunk := make([]pushLine, 0, bulk)
	for start := 0; start < in.len(); start += bulk {
		end := min(start+bulk, in.len())
		chunk = chunk[:0]
		for i := start; i < end; i++ {
			l, err := in.line(i)
			if err != nil {
				return p.failed(in, start, end, err)
			}
			chunk = append(chunk, l)
		}
		if err := p.push(ctx, chunk, start); err != nil {
			return p.failed(in, start, end, err)
		}
	}
	return p.done()
}

// linePusher pushes checked lines and counts what it did.
type linePusher struct {
	e       *adminEnv
	rep     *pushLinesReport
	ordered *ordered.Client
	batches *batch.Batches
}

// push pushes a chunk of lines, the first of which is job first: plain and scheduled jobs in one bulk
// push, ordered jobs in one ordered bulk push, batch jobs one by one (each
// is added to its batch in one step with its push).
func (p *linePusher) push(ctx context.Context, lines []pushLine, first int) error {
	var plain []*wire.Job
	var plainIdx []int
	var scheduled []bool
	var items []ordered.PushItem
	now := time.Now()
	for i, l := range lines {
		switch {
		case l.key != "":
			items = append(items, ordered.PushItem{Job: l.job, Opts: ordered.PushOpts{Key: l.key, Score: l.score}})
		case l.batch != "":
		default:
			// PushBulk schedules a job by its own "at" (Client.Push's
			// rule); "in" counts from now, as push --in does.
			sched := false
			if at := l.opts.At; !at.IsZero() || l.opts.In != 0 {
				if at.IsZero() {
					at = now.Add(l.opts.In)
				}
				l.job.Set("at", rubyjson.FloatValue(contract.EpochSeconds(at)))
				sched = at.After(now)
			}
			plain = append(plain, l.job)
			plainIdx = append(plainIdx, i)
			scheduled = append(scheduled, sched)
		}
	}
	if len(plain) > 0 {
		jids, err := p.e.api.Client().PushBulk(ctx, plain, nil)
		if err != nil {
			return err
		}
		for k, jid := range jids {
			i := plainIdx[k]
			if jid == "" {
				p.rep.Duplicates++
				if len(p.rep.DuplicateLines) < 20 {
					p.rep.DuplicateLines = append(p.rep.DuplicateLines, lines[i].n)
				}
				continue
			}
			p.rep.JIDs[first+i] = jid
			p.rep.Pushed++
			if scheduled[k] {
				p.rep.Scheduled++
			}
		}
	}
	if len(items) > 0 {
		if p.ordered == nil {
			c, err := ordered.NewClient(&ordered.ClientConfig{Pool: p.e.pool, Shards: p.e.c.Int("shards")})
			if err != nil {
				return err
			}
			p.ordered = c
		}
		added, err := p.ordered.PushBulk(ctx, items)
		p.rep.Ordered += added
		p.rep.Merged += len(items) - added
		if err != nil {
			return err
		}
	}
	for i, l := range lines {
		if l.batch == "" || l.key != "" {
			continue
		}
		jid, ok, err := p.batches.Push(ctx, l.batch, l.job)
		if err != nil {
			return fmt.Errorf("line %d: %w", l.n, err)
		}
		if ok {
			p.rep.JIDs[first+i] = jid
			p.rep.Pushed++
		}
	}
	return nil
}

// checkBatches makes sure, before the first push, that every batch a line
// names exists and has not completed (batches: BID → its first line).
func (p *linePusher) checkBatches(ctx context.Context, batches map[string]int) error {
	for _, bid := range slices.Sorted(maps.Keys(batches)) {
		if p.batches == nil {
			b, err := newBatches(p.e)
			if err != nil {
				return err
			}
			p.batches = b
		}
		st, err := p.batches.Status(ctx, bid)
		if errors.Is(err, batch.ErrNotFound) {
			return ucli.Exit(fmt.Sprintf("push -: line %d: no batch %s; nothing pushed", batches[bid], bid), exitNotFound)
		}
		if err != nil {
			return err
		}
		if st.CompleteAt != nil {
			return ucli.Exit(fmt.Sprintf("push -: line %d: batch %s has completed; nothing pushed", batches[bid], bid), exitRefused)
		}
	}
	return nil
}

// failed reports a push that stopped at jobs start to end-1: the lines
// before were pushed, those after were not, and those of the failed
// round trip may be pushed in part.
func (p *linePusher) failed(in *pushInput, start, end int, err error) error {
	first, last := in.lines[start].n, in.lines[end-1].n
	msg := fmt.Sprintf("push -: %v\npush -: lines before line %d were pushed (%s); lines %d-%d may be pushed in part; lines after line %d were not pushed",
		err, first, p.summary(), first, last, last)
	if start == 0 {
		msg = fmt.Sprintf("push -: %v\npush -: lines %d-%d may be pushed in part; lines after line %d were not pushed", err, first, last, last)
	}
	code := exitFailed
	if errors.Is(err, batch.ErrNotFound) {
		code = exitNotFound
	} else if errors.Is(err, batch.ErrComplete) {
		code = exitRefused
	}
	return ucli.Exit(msg, code)
}

// summary says what was pushed so far.
func (p *linePusher) summary() string {
	r := p.rep
	pushed := fmt.Sprintf("%d pushed", r.Pushed)
	if r.Scheduled > 0 {
		pushed += fmt.Sprintf(" (%d scheduled)", r.Scheduled)
	}
	parts := []string{pushed}
	if r.Ordered+r.Merged > 0 {
		parts = append(parts, fmt.Sprintf("%d to ordered queues (%d merged into an equal pending job)", r.Ordered+r.Merged, r.Merged))
	}
	if r.Duplicates > 0 {
		parts = append(parts, fmt.Sprintf("%d not pushed: a unique lock holds them", r.Duplicates))
	}
	return strings.Join(parts, ", ")
}

// done prints the report. A line a unique lock refused makes it exit 5,
// as push does for one job; the others are pushed.
func (p *linePusher) done() error {
	r := p.rep
	if p.e.json {
		if err := p.e.printJSON(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(p.e.out, "read %d %s: %s\n", r.Read, plural(r.Read, "job", "jobs"), p.summary())
	}
	if r.Duplicates > 0 {
		lines := make([]string, len(r.DuplicateLines))
		for i, n := range r.DuplicateLines {
			lines[i] = fmt.Sprint(n)
		}
		more := ""
		if r.Duplicates > len(lines) {
			more = ", …"
		}
		return ucli.Exit(fmt.Sprintf("push -: %d %s not pushed: a unique lock holds %s (lines %s%s)", r.Duplicates,
			plural(r.Duplicates, "job", "jobs"), plural(r.Duplicates, "it", "them"), strings.Join(lines, ", "), more), exitRefused)
	}
	return nil
}
