package maintenance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/rubyfixtures"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The info JSON per version (docs/sidekiq-wire.md#process-info): 8.1.2+
// moved concurrency out of info into its own hash field; 7.0.2 wrote
// weights as a tally of the weighted queue list; 8.0.9+ adds capsules.
func TestProcessInfoPerVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		v       wire.Version
		keys    []string
		weights string
	}{
		{wire.Version6, []string{"hostname", "started_at", "pid", "tag", "concurrency", "queues", "labels", "identity"}, ""},
		{wire.Version{Major: 7, Patch: 2}, []string{"hostname", "started_at", "pid", "tag", "concurrency", "queues", "weights", "labels", "identity", "version"}, `{"a":3,"b":1}`},
		{wire.Version7, []string{"hostname", "started_at", "pid", "tag", "concurrency", "queues", "weights", "labels", "identity", "version", "embedded"}, `[{"a":3,"b":0}]`},
		{wire.Version{Major: 8, Minor: 1, Patch: 1}, []string{"hostname", "started_at", "pid", "tag", "concurrency", "capsules", "queues", "weights", "labels", "identity", "version", "embedded"}, `[{"a":3,"b":0}]`},
		{wire.Version8, []string{"hostname", "started_at", "pid", "tag", "capsules", "queues", "weights", "labels", "identity", "version", "embedded"}, `[{"a":3,"b":0}]`},
	}
	for _, c := range cases {
		t.Run(c.v.String(), func(t *testing.T) {
			p := &ProcessInfo{Identity: "h:1:x", Hostname: "h", StartedAt: time.Unix(1795296573, 500000000), Concurrency: 4,
				Queues: []wire.QueueWeight{{Name: "a", Weight: 3}, {Name: "b"}}}
			info, err := rubyjson.ParseObject(p.JSON(c.v))
			require.NoError(t, err)
			require.Equal(t, c.keys, info.Keys())
			if c.weights != "" {
				w, _ := info.Get("weights")
				require.Equal(t, c.weights, string(w.Encode()))
			}
			q, _ := info.Get("queues")
			require.Equal(t, `["a","b"]`, string(q.Encode()))
		})
	}
}

// The capsule mode of 8.0.9+: strict without weights, random when every
// weight is 1, weighted otherwise.
func TestProcessInfoCapsuleMode(t *testing.T) {
	t.Parallel()
	for want, qs := range map[string][]wire.QueueWeight{
		"strict":   {{Name: "a"}, {Name: "b"}},
		"random":   {{Name: "a", Weight: 1}, {Name: "b", Weight: 1}},
		"weighted": {{Name: "a", Weight: 2}, {Name: "b", Weight: 1}},
	} {
		p := &ProcessInfo{Queues: qs}
		info, err := rubyjson.ParseObject(p.JSON(wire.Version8))
		require.NoError(t, err)
		caps, _ := info.Get("capsules")
		require.Contains(t, string(caps.Encode()), `"mode":"`+want+`"`)
	}
}

// 8.0+ tags a process without a tag with its directory's name; older
// versions leave the tag empty.
func TestProcessInfoDefaultTagPerVersion(t *testing.T) {
	t.Parallel()
	tag := func(p *ProcessInfo, v wire.Version) string {
		info, err := rubyjson.ParseObject(p.JSON(v))
		require.NoError(t, err)
		s, _ := info.Get("tag")
		str, _ := s.Str()
		return str
	}
	require.Equal(t, "", tag(&ProcessInfo{DirTag: "app"}, wire.Version7))
	require.Equal(t, "app", tag(&ProcessInfo{DirTag: "app"}, wire.Version8))
	require.Equal(t, "mine", tag(&ProcessInfo{DirTag: "app", Tag: "mine"}, wire.Version8))
}

// The 7.3.10 and 8.1.7 info of the captured processes' options is the
// captured info, byte for byte.
func TestProcessInfoMatchesRubyCapture(t *testing.T) {
	t.Parallel()
	for _, c := range []capturedProcess{captured7, captured8} {
		require.Equal(t, string(rubyfixtures.Read(t, c.version, "heartbeat_info.json")), string(c.info().JSON(c.v)), c.version)
	}
}
