package web_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The browser tests drive Debian's headless Chromium (scripts/deps.sh
// installs it) through the DevTools protocol with chromedp: one browser
// for the package, one tab per test.

const chromiumPath = "/usr/bin/chromium"

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserCancel func()
	browserErr    error
)

// browser starts the package's Chromium once; TestMain closes it.
func browser(t *testing.T) context.Context {
	t.Helper()
	browserOnce.Do(func() {
		if _, err := os.Stat(chromiumPath); err != nil {
			browserErr = fmt.Errorf("%s is missing: make test installs it (scripts/deps.sh; apt-get install chromium): %w", chromiumPath, err)
			return
		}
		dir, err := os.MkdirTemp("", "gojob-chromium-")
		if err != nil {
			browserErr = err
			return
		}
		// This machine's network is closed: without the background-network
		// flags Chromium's own update and sync calls make it refuse
		// connections.
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(chromiumPath),
			chromedp.Flag("headless", true),
			chromedp.Flag("no-sandbox", true),
			chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("no-first-run", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.UserDataDir(dir),
			chromedp.WindowSize(1280, 900),
		}
		allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelCtx := chromedp.NewContext(allocCtx)
		if err := chromedp.Do(ctx); err != nil {
			cancelCtx()
			cancelAlloc()
			browserErr = fmt.Errorf("start chromium: %w", err)
			return
		}
		browserCtx = ctx
		browserCancel = func() { cancelCtx(); cancelAlloc(); os.RemoveAll(dir) }
	})
	if browserErr != nil {
		t.Fatal(browserErr)
	}
	return browserCtx
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browserCancel != nil {
		browserCancel()
	}
	os.Exit(code)
}

// tab is one browser tab that records the page's JavaScript errors:
// uncaught exceptions, console.error calls and browser log errors (a
// blocked script, a failed resource).
type tab struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
	url  string
}

func newTab(t *testing.T) *tab {
	t.Helper()
	tb := &tab{}
	// Each tab gets a browser context of its own: cookies ignore ports, so
	// tabs of parallel tests on 127.0.0.1 would otherwise share (and
	// overwrite) each other's gojob_csrf cookie.
	ctx, cancel := chromedp.NewContext(browser(t), chromedp.WithNewBrowserContext(), chromedp.WithListener(tb.listen))
	t.Cleanup(cancel)
	// The first Run opens the tab; later ones get a deadline.
	must(t, chromedp.Do(ctx))
	// Deadlines guard against a hung browser; they are not performance
	// bounds (a loaded two-core machine runs Chromium beside the suite).
	tb.ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	return tb
}

// listen records the page's JavaScript errors.
func (tb *tab) listen(ev any) {
	{
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value))
				}
				msg = "console.error: " + strings.Join(parts, " ")
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				msg = "log: " + e.Entry.Text + " " + e.Entry.URL
			}
		}
		if msg != "" {
			tb.mu.Lock()
			tb.errs = append(tb.errs, tb.url+": "+msg)
			tb.mu.Unlock()
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// open loads url, waits for the page's main element and accepts every
// confirm() the page asks.
func (tb *tab) open(t *testing.T, url string) {
	t.Helper()
	tb.mu.Lock()
	tb.url = url
	tb.mu.Unlock()
	ctx, cancel := context.WithTimeout(tb.ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main")), acceptConfirms); err != nil {
		body, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("open %s: %v\n%s", url, err, body)
	}
}

// text returns the page's visible text.
func (tb *tab) text(t *testing.T) string {
	t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Text(chromedp.CSS("body")))
	must(t, err)
	return s
}

// click presses the button of selector and waits for the page it leads to.
func (tb *tab) click(t *testing.T, selector string) {
	t.Helper()
	n, err := chromedp.Run(tb.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, selector)))
	must(t, err)
	if n == 0 {
		t.Fatalf("%s: no %s on the page:\n%s", tb.url, selector, tb.text(t))
	}
	// Mark the page the click leaves, so the wait below sees the page the
	// click leads to, not a flash left on this one by an earlier click.
	_, err = chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`window.gojobLeft = true; true`))
	must(t, err)
	must(t, chromedp.Do(tb.ctx, acceptConfirms, chromedp.Click(chromedp.CSS(selector), chromedp.NodeVisible)))
	deadline := time.Now().Add(15 * time.Second)
	for {
		// Errors while the page changes are expected: ask again.
		// Each look has a deadline of its own: one sent while the page is
		// replaced may never be answered.
		lookCtx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
		arrived, err := chromedp.Run(lookCtx, chromedp.Evaluate[bool](`!window.gojobLeft && document.readyState === "complete" && !!document.querySelector(".flash")`))
		cancel()
		if err == nil && arrived {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: pressing %s led to no page with a flash message:\n%s", tb.url, selector, tb.text(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(t, chromedp.Do(tb.ctx, acceptConfirms))
}

// errors returns the JavaScript errors seen so far.
func (tb *tab) errors() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.errs...)
}

// screenshot saves the page as <name>.png in the artefacts directory:
// $GOJOB_ARTIFACTS/web when set, else artifacts/web at the repository's
// root (git-ignored).
func (tb *tab) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	must(t, err)
	dir := artifactsDir(t)
	path := filepath.Join(dir, name+".png")
	must(t, os.WriteFile(path, png, 0o644))
}

var artifactsOnce sync.Once

func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GOJOB_ARTIFACTS")
	if dir != "" {
		dir = filepath.Join(dir, "web")
	} else {
		root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			root = []byte("..")
		}
		dir = filepath.Join(strings.TrimSpace(string(root)), "artifacts", "web")
	}
	must(t, os.MkdirAll(dir, 0o755))
	artifactsOnce.Do(func() { t.Logf("screenshots in %s", dir) })
	return dir
}

// acceptConfirms makes the page's confirm() dialogs answer yes.
var acceptConfirms = chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
	_, err := chromedp.Evaluate[bool](`window.confirm = () => true; true`)(ctx, t)
	return err
})

// evalBool evaluates js in the tab.
func evalBool(tb *tab, js string) (bool, error) {
	return chromedp.Run(tb.ctx, chromedp.Evaluate[bool](js))
}
