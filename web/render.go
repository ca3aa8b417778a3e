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

	"github.com/gojob/gojob/internal/contract"
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

// pageSet holds one template per page, each the layout plus that page's
// "content".
type pageSet struct{ pages map[string]*template.Template }

func parsePages() (*pageSet, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
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
	"num":      num,
	"ago":      ago,
	"utc":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"dur":      humanDuration,
	"kb":       humanKB,
	"trunc":    truncate,
	"args":     argsText,
	"json":     prettyJSON,
	"setKey":   setKey,
	"add":      func(a, b int) int { return a + b },
	"sub":      func(a, b int) int { return a - b },
	"pct":      func(part, whole int64) string { return pct(part, whole) },
	"joinStrs": strings.Join,
	"ms":       func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"ivalue":   func(v rubyjson.Value) string { return string(v.Encode()) },
	"attr":     attrString,
	"pathesc":  url.PathEscape,
	"plural":   func(n int64, word string) string { return plural(int(n), word) },
	"secs":     func(ms int64) string { return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + " s" },
	// jobTime is a job's timestamp field, nil when absent (so "with" skips
	// it).
	"jobTime": func(j *wire.Job, key string) any {
		if t, ok := j.Time(key); ok {
			return t
		}
		return nil
	},
	"retryCount": func(j *wire.Job) string {
		if n, ok := j.RetryCount(); ok {
			return strconv.Itoa(n)
		}
		return ""
	},
}

// num formats n with thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
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
