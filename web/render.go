package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/numfmt"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticDir embed.FS

func staticFS() fs.FS {
	sub, err := fs.Sub(staticDir, "static")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	return sub
}

// pathSegment escapes s as one segment of a URL path (a queue name, a
// jid): url.PathEscape, and the dots of "." and "..", which a path would
// otherwise resolve.
func pathSegment(s string) string {
	e := url.PathEscape(s)
	if e == "." || e == ".." {
		return strings.Repeat("%2E", len(e))
	}
	return e
}

// staticFiles serves the files of fsys and answers 404 for a directory,
// so /static/ lists nothing.
func staticFiles(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" {
			name = "."
		}
		if fi, err := fs.Stat(fsys, name); err != nil || fi.IsDir() {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// parsePages parses the pages with the funcs, base returning the base path
// (Config.BasePath) every link and form starts with.
func parsePages(basePath string) (*pageSet, error) {
	fm := template.FuncMap{"base": func() string { return basePath }}
	for k, v := range funcs {
		fm[k] = v
	}
	base, err := template.New("layout.html").Funcs(fm).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	ps := &pageSet{pages: map[string]*template.Template{}}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, f)
		if err != nil {
			return nil, fmt.Errorf("web: template %s: %w", f, err)
		}
		ps.pages[name] = t
	}
	return ps, nil
}

// view is what every page's template gets.
type view struct {
	Title      string
	Nav        string
	CSRF       string
	ReadOnly   bool
	Flash      string
	HasCron    bool
	HasDurable bool
	// Path is the request's path and query, for the forms' "back" field.
	Path string
	Now  time.Time
	// Stats feeds the navigation's counters; nil when Redis could not be
	// read.
	Stats *api.Stats
	Data  any
}

// render executes page into a buffer first, so a template error is a clean
// 500 instead of half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, page, title, nav string, data any) {
	t := h.pages.pages[page]
	if t == nil {
		h.fail(w, r, fmt.Errorf("web: no page %q", page))
		return
	}
	v := &view{Title: title, Nav: nav, CSRF: csrfFrom(r.Context()), ReadOnly: h.cfg.ReadOnly,
		Flash: r.URL.Query().Get("flash"), HasCron: h.cfg.Cron != nil, HasDurable: h.cfg.Durable != nil,
		Path: r.URL.RequestURI(), Now: h.clock.Now(), Data: data}
	v.Stats, _ = h.api.Stats(r.Context())
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		h.fail(w, r, fmt.Errorf("web: render %s: %w", page, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

var funcs = template.FuncMap{
	"activeJobID": contract.ActiveJobID,
	"num":         numfmt.Int,
	"cnum":        compactNum,
	"ago":         when,
	"utc":         utc,
	"stamp":       stamp,
	"dur":         humanDuration,
	"kb":          humanKB,
	"trunc":       truncate,
	"args":        argsText,
	"json":        prettyJSON,
	"setKey":      setKey,
	"add":         func(a, b int) int { return a + b },
	"sub":         func(a, b int) int { return a - b },
	"pct":         func(part, whole int64) string { return pct(part, whole) },
	"joinStrs":    strings.Join,
	"ms":          func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"ivalue":      func(v rubyjson.Value) string { return string(v.Encode()) },
	"attr":        attrString,
	"pathesc":     pathSegment,
	// dict builds a map for a nested template: dict "K1" v1 "K2" v2.
	"dict": func(kv ...any) map[string]any {
		m := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			if k, ok := kv[i].(string); ok {
				m[k] = kv[i+1]
			}
		}
		return m
	},
	// memberKey is a batch member's address in its set: "<score>-<jid>".
	"memberKey": func(m *batch.Member) string { return contract.FormatScore(m.Score) + "-" + m.JID },
	// deref is the time a *time.Time points to (zero for nil).
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
	// queuesearch is the set pages' search for a queue's jobs.
	"queuesearch": queueSearch,
	"plural":      pluralAny,
	"secs":        func(ms int64) string { return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + " s" },
	// jobTime is a job's timestamp field, nil when absent (so "with" skips
	// it).
	"jobTime": func(j *wire.Job, key string) any {
		if t, ok := j.Time(key); ok {
			return t
		}
		return nil
	},
	"displayClass": func(j *wire.Job) string { return (&api.JobRecord{Job: j}).DisplayClass() },
	"displayArgs":  func(j *wire.Job) []rubyjson.Value { return (&api.JobRecord{Job: j}).DisplayArgs() },
	"mul100":       func(f *float64) float64 { return *f * 100 },
	"retryCount": func(j *wire.Job) string {
		if n, ok := j.RetryCount(); ok {
			return strconv.Itoa(n)
		}
		return ""
	},
}

// utc is the absolute form of a time on every page.
func utc(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// when shows a time the same way on every page: relative ("3 min ago",
// "in 2 h") with the absolute UTC time, zone included, as its tooltip and
// machine-readable datetime.
func when(now, t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339) + `" title="` + utc(t) + `">` +
		template.HTMLEscapeString(ago(now, t)) + `</time>`)
}

// stamp shows a timestamp stored as text (SideJob's RFC 3339 with
// nanoseconds) like when; text that is no timestamp is shown as it is.
func stamp(now time.Time, s string) template.HTML {
	if s == "" {
		return "—"
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999 -0700", "2006-01-02 15:04:05 MST"} {
		if t, err := time.Parse(layout, s); err == nil {
			return when(now, t) + template.HTML(` <span class="muted small">`+utc(t)+`</span>`)
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 1e9 {
		t := time.Unix(0, int64(f*1e9))
		return when(now, t) + template.HTML(` <span class="muted small">`+utc(t)+`</span>`)
	}
	return template.HTML(template.HTMLEscapeString(s))
}

// compactNum fits any count on a card: up to 6 digits in full
// ("999,999"), then "1.2M", "1.23B" (the exact number goes in the title
// attribute beside it).
func compactNum(n int64) string {
	a := n
	if a < 0 {
		a = -a
	}
	if a < 1_000_000 {
		return numfmt.Int(n)
	}
	units := []struct {
		div  float64
		unit string
	}{{1e15, "P"}, {1e12, "T"}, {1e9, "B"}, {1e6, "M"}}
	for _, u := range units {
		if float64(a) >= u.div {
			v := float64(n) / u.div
			prec := 2
			if math.Abs(v) >= 100 {
				prec = 0
			} else if math.Abs(v) >= 10 {
				prec = 1
			}
			return strconv.FormatFloat(math.Trunc(v*math.Pow10(prec))/math.Pow10(prec), 'f', prec, 64) + u.unit
		}
	}
	return numfmt.Int(n)
}

// ago is a short relative time: "12 s ago", "in 3 min".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + humanDuration(-d)
	}
	return humanDuration(d) + " ago"
}

// humanDuration is a duration in its largest whole unit: "45 s", "3 min",
// "2 h", "5 d".
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d.Hours()))
	default:
		return fmt.Sprintf("%d d", int(d.Hours()/24))
	}
}

// humanKB formats a size in KB: "512 KB", "84.2 MB", "1.3 GB".
func humanKB(kb int64) string {
	switch {
	case kb <= 0:
		return "—"
	case kb < 1024:
		return fmt.Sprintf("%d KB", kb)
	case kb < 1024*1024:
		return fmt.Sprintf("%.1f MB", float64(kb)/1024)
	default:
		return fmt.Sprintf("%.1f GB", float64(kb)/1024/1024)
	}
}

func truncate(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// argsText shows args as Ruby's Web UI does: each arg's JSON, comma
// separated.
func argsText(args []rubyjson.Value) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = string(a.Encode())
	}
	return strings.Join(parts, ", ")
}

// prettyJSON indents raw JSON; invalid JSON is shown as it is.
func prettyJSON(raw []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// setKey is a sorted-set entry's URL key, Ruby's Web UI row key
// "<score>-<jid>".
func setKey(e *api.SortedEntry) string { return contract.FormatScore(e.Score) + "-" + e.JID() }

// parseSetKey splits "<score>-<jid>" at the first "-" after the score
// (a score is never negative here).
func parseSetKey(key string) (float64, string, bool) {
	s, jid, ok := strings.Cut(key, "-")
	if !ok || jid == "" {
		return 0, "", false
	}
	score, err := contract.ParseScore(s)
	if err != nil || math.IsNaN(score) {
		return 0, "", false
	}
	return score, jid, true
}

func pct(part, whole int64) string {
	if whole <= 0 {
		return "0%"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// attrString reads a string, number or array attribute of a process's info
// for display ("" when absent).
func attrString(p *api.Process, key string) string {
	v, ok := p.Attributes.Get(key)
	if !ok || v.Kind() == rubyjson.Null {
		return ""
	}
	if s, ok := v.Str(); ok {
		return s
	}
	return string(v.Encode())
}

// pluralAny is the template's plural: any integer, with thousands
// separators ("1 job", "1,234 periodic jobs").
func pluralAny(n any, word string) string {
	var v int64
	switch x := n.(type) {
	case int:
		v = int64(x)
	case int64:
		v = x
	case int32:
		v = int64(x)
	case uint64:
		v = int64(x)
	}
	if v == 1 {
		return "1 " + word
	}
	return numfmt.Int(v) + " " + pluralWord(word)
}

// plural returns "1 job" / "3 jobs" / "1,234 processes".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return numfmt.Int(int64(n)) + " " + pluralWord(word)
}

// pluralWord is the plural of an English noun phrase's last word.
func pluralWord(word string) string {
	if strings.HasSuffix(word, "s") || strings.HasSuffix(word, "x") || strings.HasSuffix(word, "ch") {
		return word + "es"
	}
	return word + "s"
}

// queueSearch is the search of the set pages that finds a queue's jobs:
// the "queue" member as Ruby's JSON.generate writes it.
func queueSearch(name string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(name)
	return `"queue":` + strings.TrimSpace(b.String())
}
