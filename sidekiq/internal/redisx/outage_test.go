package redisx

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every failure counts as an error; an outage counts once, from its first
// failure or stall to the success that ends it.
func TestOutageLogCountsErrorsAndOutages(t *testing.T) {
	var o OutageLog
	o.Failed(errors.New("refused"))
	o.Failed(errors.New("refused"))
	require.True(t, o.Down())
	o.OK()
	o.OK()
	o.Stalled(time.Second)
	o.Failed(errors.New("reset"))
	o.OK()
	errs, outages := o.Counts()
	require.Equal(t, int64(3), errs)
	require.Equal(t, int64(2), outages)
	require.False(t, o.Down())
}
