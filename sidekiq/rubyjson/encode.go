package rubyjson

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// Encode returns v as Ruby's JSON.generate writes it: compact, raw UTF-8,
// no HTML escaping, U+2028/U+2029 raw, floats in Float#to_s form.
func (v Value) Encode() []byte { return v.AppendTo(nil) }

// AppendTo appends the encoding of v to dst.
func (v Value) AppendTo(dst []byte) []byte {
	switch v.kind {
	case Null:
		return append(dst, "null"...)
	case Bool:
		if v.b {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case Integer:
		return append(dst, v.s...)
	case Float:
		return append(dst, v.floatText()...)
	case String:
		return AppendString(dst, v.s)
	case Array:
		dst = append(dst, '[')
		for i, e := range v.elems() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = e.AppendTo(dst)
		}
		return append(dst, ']')
	case Object:
		dst = append(dst, '{')
		if v.obj != nil {
			for i, k := range v.obj.keys {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = AppendString(dst, k)
				dst = append(dst, ':')
				dst = v.obj.vals[i].AppendTo(dst)
			}
		}
		return append(dst, '}')
	}
	return dst
}

const hexdig = "0123456789abcdef"

// AppendString appends s as a JSON string the way Ruby's json generator
// (ascii_only and script_safe off) writes it: only '"', '\\' and control
// characters are escaped; everything else, invalid UTF-8 included, is raw.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexdig[c>>4], hexdig[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// FormatFloat formats f as Ruby's Float#to_s does: the shortest digits that
// round-trip, in fixed notation with at least one fractional digit when the
// decimal exponent is in (-4, 15] (that is, for magnitudes in [1e-4, 1e15)),
// and also in [1e15, 1e16) when the shortest digits have a fraction
// ("1000000000000000.1"), otherwise as d.ddde+XX with an exponent of at least
// two digits ("1.0e+15", "1.0e+16", "1.5e-07").
func FormatFloat(f float64) string {
	return string(AppendFloat(nil, f))
}

// AppendFloat appends FormatFloat(f) to dst.
func AppendFloat(dst []byte, f float64) []byte {
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

// ValidUTF8 reports whether every string in v is valid UTF-8 (Ruby's
// generator refuses invalid strings).
func ValidUTF8(v Value) bool {
	switch v.kind {
	case String:
		return utf8.ValidString(v.s)
	case Array:
		for _, e := range v.elems() {
			if !ValidUTF8(e) {
				return false
			}
		}
	case Object:
		for i, k := range v.obj.keys {
			if !utf8.ValidString(k) || !ValidUTF8(v.obj.vals[i]) {
				return false
			}
		}
	}
	return true
}
