package cli

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// gojob work --metrics-addr serves /metrics and the health endpoints; a
// taken address is a usage error.
func TestWorkServesMetricsAndHealth(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	startWorker(t, rs.URL(), "--metrics-addr", addr)
	get := func(path string) (int, string) {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	wait.For(t, "readyz", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	code, _ := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.Contains(body, "\ngojob_slots 10\n"), body)
	require.Contains(t, body, "\ngojob_build_info{")
	// The cluster's gauges come from gojob web, or from the one worker
	// asked with --cluster-metrics: not from every worker.
	require.NotContains(t, body, "gojob_set_size")
	require.NotContains(t, body, "gojob_cluster_processed_total")

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr = ln.Addr().String()
	ln.Close()
	startWorker(t, rs.URL(), "--metrics-addr", addr, "--cluster-metrics")
	wait.For(t, "readyz", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	_, body = get("/metrics")
	require.Contains(t, body, "\ngojob_set_size{set=\"retry\"} 0\n")
	_, errOut, rc := runCLI(t, "work", "-r", rs.URL(), "--cluster-metrics")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "--cluster-metrics needs --metrics-addr")

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	_, errOut, rc = runCLI(t, "work", "-r", rs.URL(), "--metrics-addr", taken.Addr().String())
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "--metrics-addr")
}
