package contract

import "strconv"

// RubyToI is Ruby's String#to_i (and nil.to_i, for ""): the leading decimal
// integer after optional blanks and sign, or 0. Sidekiq reads its counters
// and heartbeat fields this way, so a malformed value reads as 0 rather than
// failing.
func RubyToI(s string) int64 {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, _ := strconv.ParseInt(s[start:i], 10, 64)
	return n
}

// RubyToF approximates Ruby's String#to_f for the numbers Sidekiq writes:
// a float, or the leading integer.
func RubyToF(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return float64(RubyToI(s))
	}
	return f
}
