package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"

	"github.com/alicebob/miniredis/v2"
	ucli "github.com/urfave/cli/v2"
)

// defaultRedisURL is where every command goes without -r or REDIS_URL.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// startEmbedded starts gojob dev's embedded Redis-protocol server on addr.
//
// It never moves to another address on its own: every other command (and
// the examples) default to 127.0.0.1:6379, so a dev server that silently
// listened elsewhere would leave them reading and writing whatever Redis
// holds the port. When the address is taken it refuses (exit 5) and says
// what to run instead.
func startEmbedded(addr string) (*miniredis.Miniredis, string, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(addr); err != nil {
		free := freeDevAddr()
		return nil, "", ucli.Exit(fmt.Sprintf(`cannot listen on %s: %v
gojob dev does not move to another port on its own: every gojob command
defaults to %s and would reach whatever listens there. Either
  gojob dev --addr %s       and export REDIS_URL=redis://%s/0 where you run gojob
  gojob dev --redis URL   to run the worker and the demo jobs on a Redis you own (--no-demo: no demo jobs)`,
			addr, err, defaultRedisURL, free, free), exitRefused)
	}
	if err := registerBitfield(mr); err != nil {
		mr.Close()
		return nil, "", err
	}
	return mr, "redis://" + mr.Addr() + "/0", nil
}

// freeDevAddr returns a loopback address free now for the exit-5 hint:
// the first free port of 6380-6389 (easy to type and remember), else one
// the kernel picks. It never returns the default 6379, whoever holds it.
func freeDevAddr() string {
	for port := 6380; port <= 6389; port++ {
		if a, ok := tryListen(fmt.Sprintf("127.0.0.1:%d", port)); ok {
			return a
		}
	}
	if a, ok := tryListen("127.0.0.1:0"); ok {
		return a
	}
	return "127.0.0.1:6380"
}

// tryListen reports whether addr can be listened on, and the address.
func tryListen(addr string) (string, bool) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", false
	}
	defer ln.Close()
	return ln.Addr().String(), true
}

// printDevHints tells a newcomer how to reach the dev server at url from
// other shells: the export line when it is not the default URL, a warning
// when REDIS_URL points elsewhere, and how to install gojob when it is not
// on PATH (gojob dev run with go run).
func printDevHints(w io.Writer, url string) {
	env := os.Getenv("REDIS_URL")
	switch {
	case url != defaultRedisURL:
		fmt.Fprintf(w, "gojob commands default to %s; to reach this server, in the shells where you run them:\n", defaultRedisURL)
		fmt.Fprintf(w, "  export REDIS_URL=%s\n", url)
	case env != "" && env != url:
		fmt.Fprintf(w, "note: REDIS_URL=%s is set in this shell; gojob commands run with it do not reach this server (unset REDIS_URL)\n", env)
	}
	fmt.Fprintln(w, "try: gojob stats    gojob retries    gojob processes    or point the Sidekiq Web UI at it")
	if _, err := exec.LookPath("gojob"); err != nil {
		fmt.Fprintln(w, "gojob is not on your PATH: run make install (or go install ./cmd/gojob) in the gojob checkout,")
		fmt.Fprintln(w, "and make sure $(go env GOPATH)/bin is on your PATH")
	}
}
