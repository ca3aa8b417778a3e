package contract_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The limits wire.Job writes read back exactly, and a value that is not a
// positive number of seconds is refused.
func TestLimitsReadBackAndRefuseNonPositiveNumbers(t *testing.T) {
	j, err := wire.NewJob("Limited")
	require.NoError(t, err)
	require.NoError(t, j.SetTimeout(2*time.Second))
	require.NoError(t, j.SetHeartbeatTimeout(300*time.Millisecond))
	d, err := contract.Timeout(j)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, d)
	d, err = contract.HeartbeatTimeout(j)
	require.NoError(t, err)
	require.Equal(t, 300*time.Millisecond, d)

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
		j, err := wire.ParseJob([]byte(payload))
		require.NoError(t, err)
		_, err1 := contract.Timeout(j)
		_, err2 := contract.HeartbeatTimeout(j)
		got := ""
		if err1 != nil {
			got = err1.Error()
		} else if err2 != nil {
			got = err2.Error()
		}
		require.Equal(t, want, got, payload)
	}
}
