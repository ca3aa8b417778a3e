package rubyjson

import "github.com/gojob/gojob/internal/rubyfloat"

// Encode returns v as Ruby's JSON.generate writes it: compact, raw UTF-8,
// no HTML escaping, U+2028/U+2029 raw, floats in Float#to_s form.
func (v Value) Encode() []byte { return v.appendTo(nil) }

// appendTo appends the encoding of v to dst.
func (v Value) appendTo(dst []byte) []byte {
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
		return appendString(dst, v.s)
	case Array:
		dst = append(dst, '[')
		for i, e := range v.elems() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = e.appendTo(dst)
		}
		return append(dst, ']')
	case Object:
		dst = append(dst, '{')
		if v.obj != nil {
			for i, k := range v.obj.keys {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendString(dst, k)
				dst = append(dst, ':')
				dst = v.obj.vals[i].appendTo(dst)
			}
		}
		return append(dst, '}')
	}
	return dst
}

const hexdig = "0123456789abcdef"

// appendString appends s as a JSON string the way Ruby's json generator
// (ascii_only and script_safe off) writes it: only '"', '\\' and control
// characters are escaped; everything else, invalid UTF-8 included, is raw.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		if e := shortEscapes[c]; e != 0 {
			dst = append(dst, '\\', e)
		} else {
			dst = append(dst, '\\', 'u', '0', '0', hexdig[c>>4], hexdig[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// shortEscapes are the characters appendString escapes as a backslash and
// one letter (or themselves); the other control characters are \u00XX.
var shortEscapes = [256]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// formatFloat is Ruby's Float#to_s of f (rubyfloat.Format).
func formatFloat(f float64) string { return rubyfloat.Format(f) }

// appendFloat appends Ruby's Float#to_s of f to dst.
func appendFloat(dst []byte, f float64) []byte { return rubyfloat.Append(dst, f) }
