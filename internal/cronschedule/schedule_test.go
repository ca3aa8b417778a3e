package cronschedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// The forms sidekiq-cron accepts through fugit that gojob supports parse;
// the ones it does not support are errors, never a different schedule.
func TestScheduleParsesFugitFormsOrRefusesThem(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"* * * * *", "*/5 * * * *", "30 * * * * *", "0 9 * * mon-fri", "@hourly", "@daily",
		"@midnight", "@noon", "@weekly", "@monthly", "@yearly", "@annually", "0 5 * * * Europe/Berlin", "0 5 * * * UTC",
		"0 5 * * * +0100", "0 0 * * 7", "every 5 minutes", "every weekday at 7:30", "every monday and friday at 5pm",
		"every day at noon Europe/Berlin"} {
		_, err := Parse(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "every day at five", "every day at 12am", "every day at 11:45pm", "every fortnight", "0 0 L * *", "0 0 * * 1#2", "0 0 -1 * *", "@reboot",
		"0 5 * * * Mars/Olympus", "* * *"} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
}

// Previous is fugit's previous_time: the latest tick at or before now−1 s,
// so a tick counts only from one second after it; none older than within.
func TestPreviousTickIsFugitsPreviousTime(t *testing.T) {
	t.Parallel()
	every, err := Parse("* * * * *")
	require.NoError(t, err)
	tick, ok := every.Previous(at("2024-01-01T12:00:00.5Z"), time.Minute, time.UTC)
	require.True(t, ok)
	require.Equal(t, at("2024-01-01T11:59:00Z"), tick)
	tick, ok = every.Previous(at("2024-01-01T12:00:01Z"), time.Minute, time.UTC)
	require.True(t, ok)
	require.Equal(t, at("2024-01-01T12:00:00Z"), tick)

	hourly, err := Parse("0 * * * *")
	require.NoError(t, err)
	_, ok = hourly.Previous(at("2024-01-01T12:01:02Z"), time.Minute, time.UTC)
	require.False(t, ok, "62 s after the tick is past the grace")
	tick, ok = hourly.Previous(at("2024-01-01T12:01:00Z"), time.Minute, time.UTC)
	require.True(t, ok, "60 s after is within it, as the gem's `> 60`")
	require.Equal(t, at("2024-01-01T12:00:00Z"), tick)

	berlin, err := Parse("0 5 * * * Europe/Berlin")
	require.NoError(t, err)
	tick, ok = berlin.Previous(at("2024-01-01T04:00:30Z"), time.Minute, time.UTC)
	require.True(t, ok)
	require.Equal(t, at("2024-01-01T04:00:00Z"), tick.UTC(), "05:00 in Berlin is 04:00 UTC in winter")

	secs, err := Parse("*/10 * * * * *")
	require.NoError(t, err)
	tick, ok = secs.Previous(at("2024-01-01T12:00:25Z"), time.Minute, time.UTC)
	require.True(t, ok)
	require.Equal(t, at("2024-01-01T12:00:20Z"), tick)
}
