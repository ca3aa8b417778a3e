package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The limits are written as integers when whole and as Ruby floats
// otherwise, and refused unless they are a positive duration.
func TestLimitsWriteSecondsAndRefuseNonPositiveDurations(t *testing.T) {
	j, err := NewJob("Limited")
	require.NoError(t, err)
	require.NoError(t, j.SetTimeout(2*time.Second))
	require.NoError(t, j.SetHeartbeatTimeout(300*time.Millisecond))
	require.Equal(t, `{"class":"Limited","args":[],"timeout":2,"heartbeat_timeout":0.3}`, string(j.Bytes()))

	require.Error(t, j.SetTimeout(0))
	require.Error(t, j.SetHeartbeatTimeout(-time.Second))
}
