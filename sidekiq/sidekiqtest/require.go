package sidekiqtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Want narrows the jobs RequirePushed matches; zero fields match any job.
type Want struct {
	// Args are the job's positional arguments as Go values, encoded as
	// typed encodes them (a struct is a hash, a typed.Positional struct
	// the arguments it holds). They must equal the job's args as Ruby's ==
	// compares them: hashes whatever their key order, 1 and 1.0 told
	// apart (unlike Ruby). Nil matches any arguments.
	Args []any
	// Queue is the job's queue.
	Queue string
	// At is the time a scheduled job is due, to the millisecond; a job
	// pushed for now has no time and does not match.
	At time.Time
	// Count is the number of matching jobs required; 0 means at least one.
	Count int
}

// encodeArgs encodes want's arguments.
func encodeArgs(args []any) (rubyjson.Value, error) {
	out := make([]rubyjson.Value, 0, len(args))
	for i, a := range args {
		j, err := typed.NewJob[any]("", a)
		if err != nil {
			return rubyjson.Value{}, fmt.Errorf("Want.Args[%d]: %w", i, err)
		}
		out = append(out, j.Args()...)
	}
	return rubyjson.ArrayValue(out...), nil
}

func describeJob(j *wire.Job) string {
	a, _ := j.Get("args")
	s := fmt.Sprintf("%s queue=%s args=%s", j.Class(), j.Queue(), a.Encode())
	if at, ok := dueAt(j); ok {
		s += " at=" + at.UTC().Format(time.RFC3339Nano)
	}
	return s
}

func dueAt(j *wire.Job) (time.Time, bool) {
	v, ok := j.Get("at")
	f, isNum := v.Float()
	if !ok || !isNum {
		return time.Time{}, false
	}
	return contract.FromEpochSeconds(f), true
}

// match returns the captured jobs of class that match w.
func (f *Fake) match(class string, w *Want) ([]*wire.Job, error) {
	if w == nil {
		w = &Want{}
	}
	var args rubyjson.Value
	if w.Args != nil {
		var err error
		if args, err = encodeArgs(w.Args); err != nil {
			return nil, err
		}
	}
	var out []*wire.Job
	for _, j := range f.Jobs(class) {
		if w.Args != nil {
			got, _ := j.Get("args")
			if !same(got, args) {
				continue
			}
		}
		if w.Queue != "" && j.Queue() != w.Queue {
			continue
		}
		if !w.At.IsZero() {
			at, ok := dueAt(j)
			if !ok || at.Sub(w.At).Abs() >= time.Millisecond {
				continue
			}
		}
		out = append(out, j)
	}
	return out, nil
}

// RequirePushed fails the test unless jobs of class matching w were pushed
// (w.Count of them when set), and returns the first. The failure lists the
// jobs that were pushed.
func RequirePushed(t testing.TB, f *Fake, class string, w *Want) *wire.Job {
	t.Helper()
	got, err := f.match(class, w)
	if err != nil {
		t.Fatalf("sidekiqtest: %v", err)
	}
	want := 1
	if w != nil && w.Count > 0 {
		want = w.Count
	}
	if len(got) == 0 || (w != nil && w.Count > 0 && len(got) != want) {
		t.Fatalf("sidekiqtest: want %d pushed %s job(s) matching %s, got %d; pushed:\n%s", want, class, describeWant(w), len(got), f.listing())
	}
	return got[0]
}

// RequireNotPushed fails the test if a job of class matching w was pushed.
func RequireNotPushed(t testing.TB, f *Fake, class string, w *Want) {
	t.Helper()
	got, err := f.match(class, w)
	if err != nil {
		t.Fatalf("sidekiqtest: %v", err)
	}
	if len(got) > 0 {
		t.Fatalf("sidekiqtest: want no pushed %s job matching %s, got %d; pushed:\n%s", class, describeWant(w), len(got), f.listing())
	}
}

func describeWant(w *Want) string {
	if w == nil {
		return "anything"
	}
	var parts []string
	if w.Args != nil {
		a, err := encodeArgs(w.Args)
		if err == nil {
			parts = append(parts, "args="+string(a.Encode()))
		}
	}
	if w.Queue != "" {
		parts = append(parts, "queue="+w.Queue)
	}
	if !w.At.IsZero() {
		parts = append(parts, "at="+w.At.UTC().Format(time.RFC3339Nano))
	}
	if len(parts) == 0 {
		return "anything"
	}
	return strings.Join(parts, " ")
}

func (f *Fake) listing() string {
	jobs := f.Jobs("")
	if len(jobs) == 0 {
		return "  (none)"
	}
	var b strings.Builder
	for _, j := range jobs {
		b.WriteString("  " + describeJob(j) + "\n")
	}
	return b.String()
}

// same compares two values as Ruby's == would, but for Integer and Float,
// which it tells apart.
func same(a, b rubyjson.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case rubyjson.Array:
		ae, _ := a.Array()
		be, _ := b.Array()
		if len(ae) != len(be) {
			return false
		}
		for i := range ae {
			if !same(ae[i], be[i]) {
				return false
			}
		}
		return true
	case rubyjson.Object:
		am, _ := a.Map()
		bm, _ := b.Map()
		if am.Len() != bm.Len() {
			return false
		}
		for i := range am.Len() {
			k, v := am.At(i)
			w, ok := bm.Get(k)
			if !ok || !same(v, w) {
				return false
			}
		}
		return true
	}
	return rubyjson.Equal(a, b)
}
