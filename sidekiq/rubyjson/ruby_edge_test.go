package rubyjson

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFormatFloatSixteenDigitBoundary pins Ruby 3.1's Float#to_s between
// 1e15 and 1e16, found by the compat property test against real Ruby: fixed
// notation when the shortest digits have a fraction (17 significant digits),
// exponent notation otherwise.
func TestFormatFloatSixteenDigitBoundary(t *testing.T) {
	t.Parallel()
	cases := []struct {
		f    float64
		want string
	}{
		{1000000000000000.1, "1000000000000000.1"},
		{1000000000000000.2, "1000000000000000.2"},
		{-1000000000000000.1, "-1000000000000000.1"},
		{3764194670747127.5, "3764194670747127.5"},
		{1234567890123456.8, "1234567890123456.8"},
		{1e15, "1.0e+15"},
		{1000000000000001, "1.000000000000001e+15"},
		{1234567890123456, "1.234567890123456e+15"},
		{9999999999999998, "9.999999999999998e+15"},
		{123456789012345.67, "123456789012345.67"},
		{99999999999999.99, "99999999999999.98"},
		{12345678901234567, "1.2345678901234568e+16"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, formatFloat(c.f), "%v", c.f)
	}
	v, err := Parse([]byte(`[3023308511535338.5,3.0233085115353385e+15]`))
	require.NoError(t, err)
	require.Equal(t, `[3023308511535338.5,3023308511535338.5]`, string(v.Encode()))
}
