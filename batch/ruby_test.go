package batch

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The Ruby side of batches (contrib/ruby/gojob_batch.rb) runs the same Lua
// steps as gojob: its PUSH and UPDATE heredocs are push.lua and update.lua
// byte for byte. (A <<'LUA' heredoc is taken literally by Ruby: no
// escapes, no interpolation; compat_test checks the constants Ruby loads.)
func TestRubyHelperCarriesTheLuaStepsVerbatim(t *testing.T) {
	t.Parallel()
	rb, err := os.ReadFile("../contrib/ruby/gojob_batch.rb")
	require.NoError(t, err)
	for name, src := range map[string]string{"PUSH": pushSrc, "UPDATE": updateSrc} {
		_, rest, ok := strings.Cut(string(rb), "\n  "+name+" = <<'LUA'\n")
		require.True(t, ok, "the heredoc %s", name)
		body, _, ok := strings.Cut(rest, "\nLUA\n")
		require.True(t, ok, "the end of the heredoc %s", name)
		require.Equal(t, src, body+"\n", "%s is not lua/%s.lua byte for byte", name, strings.ToLower(name))
	}
}
