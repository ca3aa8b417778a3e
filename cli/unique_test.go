package cli

import (
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// gojob push --unique-for pushes once; a second push exits 5 (refused) and says why.
func TestPushUniqueForRefusesADuplicate(t *testing.T) {
	rs := redistest.Start(t)
	url := rs.URL()
	out, errOut, rc := runCLI(t, "push", "-r", url, "--unique-for", "60", "Report", "1")
	require.Equal(t, 0, rc, errOut)
	require.Contains(t, out, "pushed ")
	_, errOut, rc = runCLI(t, "push", "-r", url, "--unique-for", "60", "Report", "1")
	require.Equal(t, exitRefused, rc)
	require.Contains(t, errOut, "not pushed: a Report job with these arguments on queue default holds the unique lock gojob-unique:")
	_, _, rc = runCLI(t, "push", "-r", url, "--unique-for", "60", "Report", "2")
	require.Equal(t, 0, rc, "other arguments")
	_, errOut, rc = runCLI(t, "push", "-r", url, "--unique-for", "60", "--unique-until", "later", "Report", "3")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "--unique-until must be start or success")
	conn, err := rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	n, err := redis.Int(conn.Do("LLEN", "queue:default"))
	require.NoError(t, err)
	require.Equal(t, 2, n)
}
