package rubytest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// webUIScript serves Sidekiq::Web (6.4.1) with WEBrick on 127.0.0.1 and a
// free port, which it prints as "SIDEKIQ_WEB_PORT=<n>". Sidekiq 6.4's Web
// needs a Rack session for its CSRF protection, so a cookie session with a
// random secret wraps it, as the Sidekiq README shows for bare Rack apps.
const webUIScript = `
require "securerandom"
require "sidekiq/web"
require "rack"
require "rack/builder"
require "rack/session/cookie"
require "webrick"
require "rack/handler/webrick"
Redis.silence_deprecations = true

app = Rack::Builder.new do
  use Rack::Session::Cookie, secret: SecureRandom.hex(64), same_site: true, max_age: 86400
  run Sidekiq::Web
end

server = WEBrick::HTTPServer.new(
  BindAddress: "127.0.0.1",
  Port: 0,
  Logger: WEBrick::Log.new($stderr, WEBrick::Log::WARN),
  AccessLog: []
)
server.mount "/", Rack::Handler::WEBrick, app
%w[TERM INT].each { |sig| trap(sig) { server.shutdown } }
puts "SIDEKIQ_WEB_PORT=#{server.config[:Port]}"
server.start
`

// WebUI is a running Sidekiq 6.4.1 Web UI (Sidekiq::Web under WEBrick) and
// a browser-like HTTP client for it: one cookie session, redirects followed,
// CSRF tokens taken from the page that holds the form.
type WebUI struct {
	// URL is the base URL, "http://127.0.0.1:<port>", without a trailing
	// slash.
	URL    string
	client *http.Client
}

// StartWebUI starts the Sidekiq 6.4.1 Web UI for the Redis at redisURL and
// stops it at the end of the test. requires are loaded after sidekiq/web
// (extensions such as "sidekiq/cron/web" add their tabs).
func StartWebUI(t testing.TB, redisURL string, requires ...string) *WebUI {
	t.Helper()
	f := filepath.Join(t.TempDir(), "webui.rb")
	extra := ""
	for _, r := range requires {
		extra += fmt.Sprintf("require %q\n", r)
	}
	// After sidekiq/web: extensions register with Sidekiq::Web if defined.
	script := strings.Replace(webUIScript, "require \"sidekiq/web\"\n", "require \"sidekiq/web\"\n"+extra, 1)
	if err := os.WriteFile(f, []byte(Prelude+script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ruby", f)
	cmd.Env = append(os.Environ(), "REDIS_URL="+redisURL)
	cmd.Stderr = testWriter{t}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("rubytest: start web ui: %v", err)
	}
	done := make(chan struct{})
	portc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if p, ok := strings.CutPrefix(line, "SIDEKIQ_WEB_PORT="); ok && !sent {
				portc <- p
				sent = true
				continue
			}
			t.Logf("webui: %s", line)
		}
		cmd.Wait()
		close(done)
	}()
	stopAtCleanup(t, cmd, done, syscall.SIGTERM, 5*time.Second)
	var port string
	select {
	case port = <-portc:
	case <-done:
		t.Fatal("rubytest: web ui exited before listening")
	case <-time.After(30 * time.Second):
		t.Fatal("rubytest: web ui did not start in 30 s")
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &WebUI{
		URL:    "http://127.0.0.1:" + port,
		client: &http.Client{Jar: jar, Timeout: 30 * time.Second},
	}
	// Wait until it answers (WEBrick accepts as soon as it printed the port,
	// but the first request also builds the Rack app).
	if _, _, err := w.Do(context.Background(), http.MethodGet, "/busy", nil); err != nil {
		t.Fatalf("rubytest: web ui not answering: %v", err)
	}
	return w
}

// Do sends one request (a form body for POST) in the UI's session, follows
// redirects, and returns the final status and body.
func (w *WebUI) Do(ctx context.Context, method, path string, form url.Values) (int, string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, w.URL+path, body)
	if err != nil {
		return 0, "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(b), nil
}

// Get fetches a page and returns its body; a status other than 200 fails
// the test.
func (w *WebUI) Get(t testing.TB, path string) string {
	t.Helper()
	return w.must(t, http.MethodGet, path, nil)
}

// Post submits form to action as a browser submits a form of page (the
// HTML of the page that shows the form): it adds the page's
// authenticity_token, posts, follows the redirect and returns the body of
// the page it lands on. A status other than 200 fails the test. Sidekiq
// rotates the session's CSRF secret on every POST, so page must have been
// fetched after the previous Post.
func (w *WebUI) Post(t testing.TB, page, action string, form url.Values) string {
	t.Helper()
	token, err := CSRFToken(page)
	if err != nil {
		t.Fatalf("rubytest: POST %s: %v", action, err)
	}
	all := url.Values{"authenticity_token": {token}}
	for k, v := range form {
		all[k] = append(all[k], v...)
	}
	return w.must(t, http.MethodPost, action, all)
}

// must does a request whose answer must be a 200: an error or another
// status fails the test. It returns the body.
func (w *WebUI) must(t testing.TB, method, path string, form url.Values) string {
	t.Helper()
	status, body, err := w.Do(context.Background(), method, path, form)
	if err != nil {
		t.Fatalf("rubytest: %s %s: %v", method, path, err)
	}
	if status != http.StatusOK {
		t.Fatalf("rubytest: %s %s: status %d\n%s", method, path, status, body)
	}
	return body
}

var csrfRe = regexp.MustCompile(`name=['"]authenticity_token['"] value=['"]([^'"]+)['"]`)

// CSRFToken returns the authenticity_token of the first form in a page.
func CSRFToken(page string) (string, error) {
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		return "", errors.New("no authenticity_token in the page")
	}
	return html.UnescapeString(m[1]), nil
}
