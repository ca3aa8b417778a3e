package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The limits are written as integers when whole and as Ruby floats
// otherwise, read back exactly, and refused unless they are a positive
// number of seconds.
func TestLimitsRoundTripAndRefuseNonPositiveNumbers(t *testing.T) {
	j, err := NewJob("Limited")
	require.NoError(t, err)
	require.NoError(t, j.SetTimeout(2*time.Second))
	require.NoError(t, j.SetHeartbeatTimeout(300*time.Millisecond))
	require.Equal(t, `{"class":"Limited","args":[],"timeout":2,"heartbeat_timeout":0.3}`, string(j.Encode()))
	d, err := j.Timeout()
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, d)
	d, err = j.HeartbeatTimeout()
	require.NoError(t, err)
	require.Equal(t, 300*time.Millisecond, d)

	require.Error(t, j.SetTimeout(0))
	require.Error(t, j.SetHeartbeatTimeout(-time.Second))

	for payload, want := range map[string]string{
		`{"class":"X","timeout":null}`:              "",
		`{"class":"X"}`:                             "",
		`{"class":"X","timeout":0}`:                 "timeout must be a number of seconds, greater than 0 and at most 1e9, got 0",
		`{"class":"X","timeout":-1.5}`:              "timeout must be a number of seconds, greater than 0 and at most 1e9, got -1.5",
		`{"class":"X","timeout":"5"}`:               `timeout must be a number of seconds, greater than 0 and at most 1e9, got "5"`,
		`{"class":"X","timeout":true}`:              "timeout must be a number of seconds, greater than 0 and at most 1e9, got true",
		`{"class":"X","timeout":1e10}`:              "timeout must be a number of seconds, greater than 0 and at most 1e9, got 10000000000.0",
		`{"class":"X","heartbeat_timeout":[1]}`:     "heartbeat_timeout must be a number of seconds, greater than 0 and at most 1e9, got [1]",
		`{"class":"X","heartbeat_timeout":0.00001}`: "",
	} {
		j, err := ParseJob([]byte(payload))
		require.NoError(t, err)
		_, err1 := j.Timeout()
		_, err2 := j.HeartbeatTimeout()
		got := ""
		if err1 != nil {
			got = err1.Error()
		} else if err2 != nil {
			got = err2.Error()
		}
		require.Equal(t, want, got, payload)
	}
}
