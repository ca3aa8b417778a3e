// Package rubyfloat formats floats as Ruby does (Float#to_s), the form
// Sidekiq writes in payloads and sorted-set scores.
package rubyfloat

import (
	"math"
	"strconv"
)

// Format formats f as Ruby's Float#to_s does: the shortest digits that
// round-trip, in fixed notation with at least one fractional digit when the
// decimal exponent is in (-4, 15] (that is, for magnitudes in [1e-4, 1e15)),
// and also in [1e15, 1e16) when the shortest digits have a fraction
// ("1000000000000000.1"), otherwise as d.ddde+XX with an exponent of at least
// two digits ("1.0e+15", "1.0e+16", "1.5e-07").
func Format(f float64) string {
	return string(Append(nil, f))
}

// Append appends Format(f) to dst.
func Append(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	if f == 0 {
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], math.Abs(f), 'e', -1, 64)
	// e is "d[.ddd]e±XX"
	var digits [24]byte
	nd := 0
	i := 0
	for ; i < len(e) && e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[nd] = e[i]
			nd++
		}
	}
	exp, _ := strconv.Atoi(string(e[i+1:]))
	decpt := exp + 1 // position of the decimal point relative to the digits
	if f < 0 {
		dst = append(dst, '-')
	}
	switch {
	case decpt > 0 && (decpt <= 15 || (decpt == 16 && nd > decpt)):
		// Ruby's flo_to_s keeps fixed notation up to 16 integer digits
		// when the shortest digits also have a fraction (17 significant
		// digits: 1000000000000000.1), but not 1e15 or 1234567890123456.0.
		if nd <= decpt {
			dst = append(dst, digits[:nd]...)
			for j := nd; j < decpt; j++ {
				dst = append(dst, '0')
			}
			dst = append(dst, '.', '0')
		} else {
			dst = append(dst, digits[:decpt]...)
			dst = append(dst, '.')
			dst = append(dst, digits[decpt:nd]...)
		}
	case decpt <= 0 && decpt > -4:
		dst = append(dst, '0', '.')
		for j := 0; j < -decpt; j++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits[:nd]...)
	default:
		dst = append(dst, digits[0], '.')
		if nd > 1 {
			dst = append(dst, digits[1:nd]...)
		} else {
			dst = append(dst, '0')
		}
		dst = append(dst, 'e')
		x := decpt - 1
		if x < 0 {
			dst = append(dst, '-')
			x = -x
		} else {
			dst = append(dst, '+')
		}
		if x < 10 {
			dst = append(dst, '0')
		}
		dst = strconv.AppendInt(dst, int64(x), 10)
	}
	return dst
}
