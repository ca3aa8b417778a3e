package contract_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]wire.Version{
		"6": wire.Version6, "7": wire.Version7, "8": wire.Version8,
		"7.1.3": {Major: 7, Minor: 1, Patch: 3}, "8.0": {Major: 8},
	} {
		got, err := contract.ParseVersion(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "5", "9.0.0", "x", "7.a.1", "1.2.3.4"} {
		_, err := contract.ParseVersion(bad)
		require.Error(t, err, bad)
	}
}
