package wire_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

// zlibStream decodes an error_backtrace's base64 into its zlib stream.
func zlibStream(t *testing.T, s string) []byte {
	t.Helper()
	z, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(s, "\n", ""))
	require.NoError(t, err)
	return z
}

// gojob frames its zlib streams as Ruby's Zlib::Deflate does: one data
// block marked final, no empty stored block (`01 00 00 ff ff`, what Go's
// compress/flate adds at Close) before the Adler-32. The captured 7.3.10
// backtrace has that framing; gojob's encoding of the same frames has it
// too and decodes to them. A backtrace too long for one block keeps Go's
// framing and still decodes.
func TestBacktraceZlibFramingIsZlibs(t *testing.T) {
	t.Parallel()
	var frames []string // one frame per line after the header comment
	for _, l := range strings.Split(strings.TrimRight(string(readShared(t, "backtrace-decoded.txt")), "\n"), "\n") {
		if !strings.HasPrefix(l, "# ") {
			frames = append(frames, l)
		}
	}
	require.Len(t, frames, 35)
	var ruby struct {
		ErrorBacktrace string `json:"error_backtrace"`
	}
	require.NoError(t, json.Unmarshal(readShared(t, "retry-entry.json"), &ruby))
	rz := zlibStream(t, ruby.ErrorBacktrace)
	got, err := wire.DecodeBacktrace(ruby.ErrorBacktrace)
	require.NoError(t, err)
	require.Equal(t, frames, got)

	for _, z := range [][]byte{rz, zlibStream(t, contract.EncodeBacktrace(frames, wire.Version7))} {
		require.Equal(t, []byte{0x78, 0x9c}, z[:2])
		require.Equal(t, byte(1), z[2]&1, "the first block is the final one")
		require.False(t, bytes.HasSuffix(z[:len(z)-4], []byte{0, 0, 0xff, 0xff}), "no empty stored block")
	}

	var long []string
	for i := range 3000 {
		long = append(long, fmt.Sprintf("app/models/thing_%d.rb:%d:in 'Thing%d#call'", i, i, i*7919%1000))
	}
	got, err = wire.DecodeBacktrace(contract.EncodeBacktrace(long, wire.Version7))
	require.NoError(t, err)
	require.Equal(t, long, got)
}

// readShared reads a file of the capture of Ruby Sidekiq 7.3.10 copied in
// testdata/ruby-fixtures/7.3.10/capture/.
func readShared(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../testdata/ruby-fixtures/7.3.10/capture/" + name)
	require.NoError(t, err)
	return b
}
