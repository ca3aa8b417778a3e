package rubyjson

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// special8 returns a mask with the high bit of each of the eight bytes of
// x (little-endian) that may be '"', '\\' or a control character (below
// 0x20), with the zero-byte tests of "Bit Twiddling Hacks" (haszero,
// hasless): 0 when none is, and when some is, its lowest set bit marks the
// first that is (a borrow only marks bytes above a true one).
func special8(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	b := x ^ (lo * '\\')
	return ((q-lo)&^q | (b-lo)&^b | (x-lo*0x20)&^x) & hi
}

// specialAt returns the position of the first quote, backslash or
// control character at or after pos, or len(data): eight bytes at a time
// (a job's long string arguments), then byte by byte.
func specialAt(data []byte, pos int) int {
	for pos+8 <= len(data) {
		if m := special8(binary.LittleEndian.Uint64(data[pos:])); m != 0 {
			return pos + bits.TrailingZeros64(m)/8
		}
		pos += 8
	}
	for ; pos < len(data); pos++ {
		if c := data[pos]; c == '"' || c == '\\' || c < 0x20 {
			return pos
		}
	}
	return pos
}

// str reads a string starting at the opening quote.
func (p *parser) str() (string, error) {
	p.pos++ // "
	start := p.pos
	// Fast path: no escapes, up to the first special byte.
	p.pos = specialAt(p.data, p.pos)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := p.src[start:p.pos]
			p.pos++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("control character in string")
		}
		p.pos++
	}
	buf := make([]byte, 0, p.pos-start+16)
	buf = append(buf, p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		// escape
		p.pos++
		if p.pos >= len(p.data) {
			break
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.errorf("invalid \\u escape")
			}
			if r >= 0xD800 && r < 0xDC00 && p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
				save := p.pos
				p.pos += 2
				lo, ok := p.hex4()
				if ok && lo >= 0xDC00 && lo < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				} else {
					p.pos = save
				}
			}
			buf = appendRune(buf, r)
		default:
			// Ruby keeps the escaped character for \" \\ \/ and any other.
			if e >= 0x80 {
				// keep a multi-byte character whole
				p.pos--
				_, n := utf8.DecodeRune(p.data[p.pos:])
				buf = append(buf, p.data[p.pos:p.pos+n]...)
				p.pos += n
			} else {
				buf = append(buf, e)
			}
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *parser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for i := 0; i < 4; i++ {
		c := p.data[p.pos+i]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// appendRune writes r as UTF-8, and a lone surrogate in its 3-byte form (as
// Ruby's parser does) rather than replacing it.
func appendRune(buf []byte, r rune) []byte {
	if r >= 0xD800 && r < 0xE000 {
		return append(buf, byte(0xE0|r>>12), byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
	}
	return utf8.AppendRune(buf, r)
}
