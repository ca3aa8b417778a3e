package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubyfixtures"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// `gojob push` writes its keys in the order of the Ruby call it stands
// for: perform_async's (options, args, class), or perform_in's (class
// before args), as the captured Ruby payloads show.
func TestPushWritesRubysKeyOrder(t *testing.T) {
	// Not parallel: see the note on runCLI.
	url := redistest.StartWith(t, redistest.Options{TCP: true}).URL()
	keys := func(raw []byte) []string {
		t.Helper()
		m, err := rubyjson.ParseObject(raw)
		require.NoError(t, err)
		var out []string
		for i := range m.Len() {
			k, _ := m.At(i)
			out = append(out, k)
		}
		return out
	}
	push := func(args ...string) []string {
		t.Helper()
		out, errOut, code := runCLI(t, append([]string{"push", "-r", url, "--json"}, args...)...)
		require.Equal(t, 0, code, errOut)
		var pushed struct {
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &pushed))
		return keys(pushed.Payload)
	}
	for _, dir := range []string{"6.4.1", "7.3.10", "8.1.7"} {
		async, in := "client_perform_async.json", "client_perform_in.json"
		if dir == "6.4.1" {
			async, in = "perform_async_simple.json", "perform_in.json"
		}
		require.Equal(t, keys(rubyfixtures.Read(t, dir, async)), push("RecJob", "1", "two", `{"three":3.5}`), dir)
		require.Equal(t, keys(rubyfixtures.Read(t, dir, in)), push("--in", "60s", "RecJob", "in60"), dir)
	}
	// HardJob.set(retry: 2, backtrace: 3, tags: ["t1"]).perform_async(42)
	// in 6.4.1: the options before args; gojob's are retry and unique_for.
	require.Equal(t, []string{"retry", "queue", "unique_for", "args", "class", "jid", "created_at", "enqueued_at"},
		push("--retry", "2", "--unique-for", "60", "HardJob", "42"))
	require.Equal(t, []string{"retry", "queue", "backtrace", "tags", "args", "class", "jid", "created_at", "enqueued_at"},
		keys(rubyfixtures.Read(t, "6.4.1", "perform_async_set_options.json")))
}
