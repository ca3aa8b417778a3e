package contract_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

func TestVersionLayouts(t *testing.T) {
	t.Parallel()
	require.True(t, contract.StrictBase64Backtrace(wire.Version{Major: 7, Minor: 2, Patch: 1}))
	require.False(t, contract.StrictBase64Backtrace(wire.Version{Major: 7, Minor: 2}))
	require.Equal(t, "workers", contract.WorkKeySuffix(wire.Version6))
	require.Equal(t, "work", contract.WorkKeySuffix(wire.Version{Major: 6, Minor: 4, Patch: 2}))
	require.True(t, contract.Breaks(wire.Version8, wire.Version7))
	require.False(t, contract.Breaks(wire.Version7, wire.Version8))
}
