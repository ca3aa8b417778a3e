package contract_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/fetchedjob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// MergeDefaults is Ruby's defaults.merge(item): the defaults' keys first,
// with the payload's values where it has them, then the payload's others.
func TestMergeDefaultsPutsTheDefaultsFirst(t *testing.T) {
	t.Parallel()
	d := rubyjson.NewMap()
	d.Set("retry", rubyjson.BoolValue(true))
	d.Set("queue", rubyjson.StringValue("default"))
	for _, parse := range []func([]byte) (*wire.Job, error){wire.ParseJob, fetchedjob.Parse[wire.Job]} {
		j, err := parse([]byte(`{"class":"X","queue":"q"}`))
		require.NoError(t, err)
		contract.MergeDefaults(j, d)
		require.Equal(t, `{"retry":true,"queue":"q","class":"X"}`, string(j.Bytes()))
	}
	var zero wire.Job
	contract.MergeDefaults(&zero, d)
	require.Equal(t, `{"retry":true,"queue":"default"}`, string(zero.Bytes()))
}
