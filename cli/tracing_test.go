package cli

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gojob/gojob/internal/gojobtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// With the OTEL_* environment set, `gojob work` exports a consumer span
// per job over OTLP/HTTP, the child of the traceparent Ruby's
// instrumentation left in the payload, and the exec child gets that span
// as TRACEPARENT, an HTTP handler as a traceparent header.
func TestWorkExportsJobSpanAndTraceparent(t *testing.T) {
	t.Parallel()
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	conn := rs.Pool(t).Get()
	defer conn.Close()
	_, err := conn.Do("LPUSH", "queue:tq", `{"retry":false,"queue":"tq","class":"Traced","args":[],"jid":"0123456789abcdef01234567","created_at":1700000000.1,"enqueued_at":1700000000.2,"traceparent":"00-`+traceID+`-`+parentID+`-01"}`)
	require.NoError(t, err)
	_, err = conn.Do("LPUSH", "queue:tq", `{"retry":false,"queue":"tq","class":"TracedHTTP","args":[],"jid":"0123456789abcdef01234568","created_at":1700000000.1,"enqueued_at":1700000000.2,"traceparent":"00-`+traceID+`-`+parentID+`-01"}`)
	require.NoError(t, err)
	header := make(chan string, 1)
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		header <- r.Header.Get("traceparent")
	}))
	defer handler.Close()

	var mu sync.Mutex
	var spans []*tracepb.Span
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	defer collector.Close()

	seen := filepath.Join(t.TempDir(), "traceparent")
	cmd := exec.Command(gojobBinary(t), "work", "-r", rs.URL(), "--sidekiq-version", "7", "-q", "tq",
		"--exec", "Traced=sh -c 'echo \"$TRACEPARENT\" > "+seen+"'", "--http", "TracedHTTP="+handler.URL)
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_BSP_SCHEDULE_DELAY=50",
		"OTEL_TRACES_EXPORTER=", "OTEL_SDK_DISABLED=")
	w := gojobtest.StartCmd(t, cmd)
	var child string
	wait.Within(t, 30*time.Second, "the job to run", func() bool {
		b, _ := os.ReadFile(seen)
		child = strings.TrimSpace(string(b))
		return child != ""
	})
	var httpTP string
	select {
	case httpTP = <-header:
	case <-time.After(30 * time.Second):
		t.Fatal("the HTTP job did not run")
	}
	wait.Within(t, 30*time.Second, "the spans to be exported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(spans) >= 2
	})
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), w.Logs.String())

	mu.Lock()
	defer mu.Unlock()
	byJID := map[string]*tracepb.Span{}
	for _, span := range spans {
		require.Equal(t, "tq process", span.Name)
		require.Equal(t, tracepb.Span_SPAN_KIND_CONSUMER, span.Kind)
		require.Equal(t, traceID, hex.EncodeToString(span.TraceId), "the payload's trace")
		require.Equal(t, parentID, hex.EncodeToString(span.ParentSpanId), "the child of the span that pushed the job")
		for _, a := range span.Attributes {
			if a.Key == "messaging.message.id" {
				byJID[a.Value.GetStringValue()] = span
			}
		}
	}
	require.Equal(t, "00-"+traceID+"-"+hex.EncodeToString(byJID["0123456789abcdef01234567"].SpanId)+"-01", child,
		"the exec child's TRACEPARENT is the job's span")
	require.Equal(t, "00-"+traceID+"-"+hex.EncodeToString(byJID["0123456789abcdef01234568"].SpanId)+"-01", httpTP,
		"the HTTP handler's traceparent header is the job's span")
}
