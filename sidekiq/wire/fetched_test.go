package wire_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/fetchedjob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A fetched job's class is read once at parse time; a change to the job
// is seen afterwards, and a job parsed into a reused Job keeps nothing of
// the one before.
func TestFetchedJobClassFollowsChanges(t *testing.T) {
	var j wire.Job
	require.NoError(t, fetchedjob.ParseInto(&j, []byte(`{"class":"A\u0042","jid":"1","args":[]}`)))
	require.Equal(t, "AB", j.Class())
	j.Set("class", rubyjson.StringValue("C"))
	require.Equal(t, "C", j.Class())
	require.Contains(t, string(j.Bytes()), `"class":"C"`)

	require.NoError(t, fetchedjob.ParseInto(&j, []byte(`{"jid":"2","class":7}`)))
	require.Equal(t, "", j.Class(), "a class that is not a string")
	require.Equal(t, "2", j.JID())
	require.Error(t, fetchedjob.ParseInto(&j, []byte(`{"class":`)))
	require.Equal(t, "", j.Class())
	require.Equal(t, "", j.JID())
}
