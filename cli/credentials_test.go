package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// A Redis password never appears in what gojob prints: errors for an
// unreachable host, an unparsable URL or a wrong password, and --help with
// REDIS_URL set. Not parallel: see runCLI; the last case sets REDIS_URL.
func TestRedisPasswordIsNeverPrinted(t *testing.T) {
	const secret = "Sup3rSecretPW"
	rs := redistest.StartWith(t, redistest.Options{TCP: true, Args: []string{"--requirepass", "theRealOne"}})
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"unreachable", []string{"stats", "-r", "redis://:" + secret + "@127.0.0.1:1/0"}, 3},
		{"bad port", []string{"stats", "-r", "redis://:" + secret + "@127.0.0.1:99999/0"}, 3},
		{"unparsable url", []string{"stats", "-r", "redis://:" + secret + "%zz@127.0.0.1/0"}, 2},
		{"wrong password", []string{"stats", "-r", "redis://:" + secret + "@" + rs.Addr() + "/0"}, 3},
		{"work, wrong password", []string{"work", "-r", "redis://:" + secret + "@" + rs.Addr() + "/0"}, 3},
		{"user and password", []string{"queues", "-r", "redis://default:" + secret + "@" + rs.Addr() + "/0"}, 3},
	}
	for _, c := range cases {
		out, errOut, code := runCLI(t, c.args...)
		require.Equal(t, c.code, code, "%s: %s%s", c.name, out, errOut)
		require.NotContains(t, out+errOut, secret, c.name)
		require.Contains(t, out+errOut, "xxxxx", "%s: the URL is shown, masked: %s", c.name, errOut)
	}
	t.Setenv("REDIS_URL", "redis://:"+secret+"@127.0.0.1:1/0")
	for _, cmd := range []string{"work", "stats", "dev", "ordered work"} {
		out, errOut, _ := runCLI(t, append(strings.Fields(cmd), "--help")...)
		require.NotContains(t, out+errOut, secret, cmd+" --help")
	}
}
