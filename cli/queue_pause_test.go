package cli

import (
	"encoding/json"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
)

// gojob queue pause/unpause writes gojob's paused set and gojob queues
// shows the state.
func TestQueuePauseCommandsAndQueuesListing(t *testing.T) {
	rs := redistest.Start(t)
	url := rs.URL()
	conn, err := rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Do("SADD", contract.KeyQueues, "mail", "default")
	require.NoError(t, err)
	_, errOut, rc := runCLI(t, "queue", "pause", "-r", url, "mail")
	require.Equal(t, 0, rc, errOut)
	members, err := redis.Strings(conn.Do("SMEMBERS", contract.KeyPausedQueues))
	require.NoError(t, err)
	require.Equal(t, []string{"mail"}, members)
	out, errOut, rc := runCLI(t, "queues", "-r", url, "--json")
	require.Equal(t, 0, rc, errOut)
	var rows []struct {
		Name   string `json:"name"`
		Paused bool   `json:"paused"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 2)
	state := map[string]bool{}
	for _, r := range rows {
		state[r.Name] = r.Paused
	}
	require.Equal(t, map[string]bool{"default": false, "mail": true}, state)
	out, _, _ = runCLI(t, "queues", "-r", url)
	require.Contains(t, out, "paused (gojob)")
	_, errOut, rc = runCLI(t, "queue", "unpause", "-r", url, "mail")
	require.Equal(t, 0, rc, errOut)
	n, err := redis.Int(conn.Do("SCARD", contract.KeyPausedQueues))
	require.NoError(t, err)
	require.Zero(t, n)
	_, _, rc = runCLI(t, "queue", "pause", "-r", url)
	require.Equal(t, 2, rc, "NAME is required")
}
