package rubyjson

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// SyntaxError describes where JSON text is malformed.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("rubyjson: %s at offset %d", e.Msg, e.Offset)
}

// maxDepth matches Ruby's JSON.parse default max_nesting of 100.
const maxDepth = 100

// Parse decodes one JSON document as Ruby's JSON.parse does: numbers keep
// their Integer/Float lexical type, objects keep their key order, a repeated
// key keeps its first position and its last value.
func Parse(data []byte) (Value, error) {
	// The document is copied into one string once; the strings and number
	// texts of its values are slices of it (one allocation instead of one
	// per value).
	return parse(data, string(data))
}

// ParseObjectShared is ParseObject without the copy: the strings and number
// texts of the result share data's memory, so data must never be modified
// afterwards. It is for buffers the caller owns and keeps as they are, such
// as a payload fresh from a Redis reply that is kept as the job's exact
// bytes (the copy is a fifth of a typical payload's parse).
func ParseObjectShared(data []byte) (*Map, error) {
	return object(parse(data, unsafe.String(unsafe.SliceData(data), len(data))))
}

func parse(data []byte, src string) (Value, error) {
	p := parser{data: data, src: src, sc: scratchPool.Get().(*scratch)}
	p.skipSpace()
	v, err := p.value(0)
	p.sc.release(err == nil)
	if err != nil {
		return Value{}, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return Value{}, p.errorf("unexpected data after the value")
	}
	return v, nil
}

// ParseObject decodes a JSON document that must be an object.
func ParseObject(data []byte) (*Map, error) {
	return object(Parse(data))
}

func object(v Value, err error) (*Map, error) {
	if err != nil {
		return nil, err
	}
	m, ok := v.Map()
	if !ok {
		return nil, fmt.Errorf("rubyjson: expected an object, got %s", v.Kind())
	}
	return m, nil
}

type parser struct {
	data []byte
	src  string // data as a string
	pos  int
	sc   *scratch
}

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: p.pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (Value, error) {
	if p.pos >= len(p.data) {
		return Value{}, p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		if depth >= maxDepth {
			return Value{}, p.errorf("nesting of %d is too deep", depth+1)
		}
		return p.object(depth + 1)
	case c == '[':
		if depth >= maxDepth {
			return Value{}, p.errorf("nesting of %d is too deep", depth+1)
		}
		return p.array(depth + 1)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return Value{}, err
		}
		return Value{kind: String, s: s}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		v, n, err := parseNumberIn(p.data, p.src, p.pos)
		if err != nil {
			return Value{}, err
		}
		p.pos = n
		return v, nil
	case c == 't':
		return p.literal("true", BoolValue(true))
	case c == 'f':
		return p.literal("false", BoolValue(false))
	case c == 'n':
		return p.literal("null", Value{})
	}
	return Value{}, p.errorf("unexpected character %q", p.data[p.pos])
}

func (p *parser) literal(word string, v Value) (Value, error) {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return Value{}, p.errorf("invalid literal")
	}
	p.pos += len(word)
	return v, nil
}

// scratch holds the members of the objects and arrays being parsed, as a
// stack: a nested value pushes above its parent's members and pops them
// when it is done. Each finished object or array is then copied out at its
// exact size, one allocation instead of one per doubling.
type scratch struct {
	keys []string
	vals []Value
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

// maxPooledScratch bounds the scratch kept for reuse.
const maxPooledScratch = 1024

// release returns the scratch to the pool. Members are cleared as they are
// popped, so a scratch back from a successful parse holds no references; a
// failed parse may leave some behind, and its scratch is dropped.
func (sc *scratch) release(ok bool) {
	if !ok || cap(sc.vals) > maxPooledScratch || cap(sc.keys) > maxPooledScratch {
		return
	}
	scratchPool.Put(sc)
}

// pop copies the members above kb/vb out at their exact size and removes
// them from the scratch.
func (sc *scratch) pop(kb, vb int) ([]string, []Value) {
	var keys []string
	if len(sc.keys) > kb {
		keys = slices.Clone(sc.keys[kb:])
		clear(sc.keys[kb:])
		sc.keys = sc.keys[:kb]
	}
	vals := slices.Clone(sc.vals[vb:])
	clear(sc.vals[vb:])
	sc.vals = sc.vals[:vb]
	return keys, vals
}

// Small objects and arrays are allocated with their members in one
// block: a decoded job is an object of about seven keys holding an array
// of a few arguments, and a Map, its keys and its values as three
// allocations (two for an array) were half of a fetched job's. The
// members' slices are cut at their length, so a later append moves them
// out of the block, as it would move an exact-size copy.
type (
	arrayBlock1 struct {
		m Map
		v [1]Value
	}
	arrayBlock4 struct {
		m Map
		v [4]Value
	}
	objectBlock4 struct {
		m Map
		k [4]string
		v [4]Value
	}
	objectBlock8 struct {
		m Map
		k [8]string
		v [8]Value
	}
	objectBlock16 struct {
		m Map
		k [16]string
		v [16]Value
	}
)

// popMap moves the members above kb/vb into a new Map (an array's when
// there are no keys above kb) and removes them from the scratch.
func (sc *scratch) popMap(kb, vb int) *Map {
	keys, vals := sc.keys[kb:], sc.vals[vb:]
	n := len(vals)
	var m *Map
	switch {
	case len(keys) == 0 && n <= 1:
		b := new(arrayBlock1)
		m = &b.m
		m.vals = b.v[:n:n]
	case len(keys) == 0 && n <= 4:
		b := new(arrayBlock4)
		m = &b.m
		m.vals = b.v[:n:n]
	case len(keys) == 0:
		m = &Map{vals: make([]Value, n)}
	case n <= 4:
		b := new(objectBlock4)
		m = &b.m
		m.keys, m.vals = b.k[:n:n], b.v[:n:n]
	case n <= 8:
		b := new(objectBlock8)
		m = &b.m
		m.keys, m.vals = b.k[:n:n], b.v[:n:n]
	case n <= 16:
		b := new(objectBlock16)
		m = &b.m
		m.keys, m.vals = b.k[:n:n], b.v[:n:n]
	default:
		m = &Map{keys: make([]string, n), vals: make([]Value, n)}
	}
	copy(m.keys, keys)
	copy(m.vals, vals)
	clear(keys)
	clear(vals)
	sc.keys, sc.vals = sc.keys[:kb], sc.vals[:vb]
	return m
}

func (p *parser) object(depth int) (Value, error) {
	p.pos++ // {
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return Value{kind: Object, obj: &Map{}}, nil
	}
	sc := p.sc
	kb, vb := len(sc.keys), len(sc.vals)
	// big takes over from the scratch once the object has more keys than
	// a linear search should look through.
	var big *Map
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return Value{}, p.errorf("expected an object key")
		}
		k, err := p.key()
		if err != nil {
			return Value{}, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return Value{}, p.errorf("expected ':'")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return Value{}, err
		}
		switch {
		case big != nil:
			big.Set(k, v)
		default:
			// A repeated key keeps its first position and its last value.
			if i := indexOf(sc.keys[kb:], k); i >= 0 {
				sc.vals[vb+i] = v
				break
			}
			sc.keys = append(sc.keys, k)
			sc.vals = append(sc.vals, v)
			if len(sc.keys)-kb > indexThreshold {
				keys, vals := sc.pop(kb, vb)
				big = &Map{keys: keys, vals: vals}
				big.buildIndex()
			}
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return Value{}, p.errorf("unexpected end of input in object")
		}
		if p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.data[p.pos] == '}' {
			p.pos++
			if big == nil {
				big = sc.popMap(kb, vb)
			}
			return Value{kind: Object, obj: big}, nil
		}
		return Value{}, p.errorf("expected ',' or '}'")
	}
}

func indexOf(keys []string, k string) int {
	for i, key := range keys {
		if key == k {
			return i
		}
	}
	return -1
}

func (p *parser) array(depth int) (Value, error) {
	p.pos++ // [
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return arrayOf([]Value{}), nil
	}
	sc := p.sc
	vb := len(sc.vals)
	for {
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return Value{}, err
		}
		sc.vals = append(sc.vals, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return Value{}, p.errorf("unexpected end of input in array")
		}
		if p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.data[p.pos] == ']' {
			p.pos++
			return Value{kind: Array, obj: sc.popMap(len(sc.keys), vb)}, nil
		}
		return Value{}, p.errorf("expected ',' or ']'")
	}
}

// key reads an object key: a slice of the document's text, as any string
// without escapes.
func (p *parser) key() (string, error) { return p.str() }

// special8 reports whether one of the eight bytes of x is '"', '\\' or a
// control character (below 0x20), with the zero-byte tests of "Bit
// Twiddling Hacks" (haszero, hasless): exact for "some byte is", which is
// all the caller needs before it looks byte by byte.
func special8(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	b := x ^ (lo * '\\')
	return ((q-lo)&^q|(b-lo)&^b|(x-lo*0x20)&^x)&hi != 0
}

// str reads a string starting at the opening quote.
func (p *parser) str() (string, error) {
	p.pos++ // "
	start := p.pos
	// Fast path: no escapes. Eight bytes at a time while none of them is a
	// quote, a backslash or a control character (a job's long string
	// arguments), then byte by byte.
	for p.pos+8 <= len(p.data) {
		if special8(binary.LittleEndian.Uint64(p.data[p.pos:])) {
			break
		}
		p.pos += 8
	}
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

var errNumber = errors.New("invalid number")

// parseNumber reads a JSON number at data[pos:] and returns it normalized as
// Ruby's parse and generate would write it, and the position after it.
func parseNumber(data []byte, pos int) (Value, int, error) {
	return parseNumberIn(data, "", pos)
}

// parseNumberIn is parseNumber with data's text as src (when not empty),
// whose slices become the number's text.
func parseNumberIn(data []byte, src string, pos int) (Value, int, error) {
	start := pos
	bad := func() (Value, int, error) {
		return Value{}, pos, &SyntaxError{Offset: start, Msg: errNumber.Error()}
	}
	if pos < len(data) && data[pos] == '-' {
		pos++
	}
	if pos >= len(data) {
		return bad()
	}
	switch {
	case data[pos] == '0':
		pos++
	case data[pos] >= '1' && data[pos] <= '9':
		for pos < len(data) && data[pos] >= '0' && data[pos] <= '9' {
			pos++
		}
	default:
		return bad()
	}
	isFloat := false
	if pos < len(data) && data[pos] == '.' {
		pos++
		d := pos
		for pos < len(data) && data[pos] >= '0' && data[pos] <= '9' {
			pos++
		}
		if pos == d {
			return bad()
		}
		isFloat = true
	}
	if pos < len(data) && (data[pos] == 'e' || data[pos] == 'E') {
		pos++
		if pos < len(data) && (data[pos] == '+' || data[pos] == '-') {
			pos++
		}
		d := pos
		for pos < len(data) && data[pos] >= '0' && data[pos] <= '9' {
			pos++
		}
		if pos == d {
			return bad()
		}
		isFloat = true
	}
	var text string
	if src != "" {
		text = src[start:pos]
	} else {
		text = string(data[start:pos])
	}
	if !isFloat {
		if text == "-0" {
			text = "0"
		} else if len(text) > 1 && text[0] == '0' {
			return bad()
		} else if len(text) > 2 && text[0] == '-' && text[1] == '0' {
			return bad()
		}
		return Value{kind: Integer, s: text}, pos, nil
	}
	// A text not in Float#to_s form is shaped when it is written or read
	// (Value.floatText), not here.
	return Value{kind: Float, s: text, unshaped: !inRubyForm(text)}, pos, nil
}

// shapeFloat returns the Float#to_s form of a valid JSON float's text.
func shapeFloat(text string) string {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		// Out of float64 range: Ruby would parse an infinity and refuse to
		// write it. Keep the text so nothing is lost.
		return text
	}
	var buf [32]byte
	if out := AppendFloat(buf[:0], f); string(out) != text {
		return string(out)
	}
	return text
}

// inRubyForm reports, without converting, whether the text of a valid JSON
// float is already what Float#to_s writes for its value: fixed notation
// (no exponent), a magnitude where Ruby writes fixed notation for such
// texts (1e-4 up to 1e15: FormatFloat), no trailing zero in the fraction but for "X.0", and at most 15
// significant digits. Such a text is the shortest that reads back as its
// double: two decimals of 15 digits or fewer never read as the same double
// (DBL_DIG), so no shorter one does. Longer texts go through
// ParseFloat/AppendFloat.
func inRubyForm(text string) bool {
	if text == "" || text[0] == '-' {
		if len(text) < 2 || text[1] == '0' { // -0.x: the slow path
			return false
		}
		text = text[1:]
	}
	dot := -1
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '.':
			dot = i
		case c < '0' || c > '9':
			return false // an exponent
		}
	}
	if dot <= 0 || dot == len(text)-1 {
		return false
	}
	intPart, frac := text[:dot], text[dot+1:]
	if frac != "0" && frac[len(frac)-1] == '0' {
		return false
	}
	var sig int
	if intPart == "0" {
		if frac == "0" {
			return true // 0.0
		}
		lead := 0
		for lead < len(frac) && frac[lead] == '0' {
			lead++
		}
		if lead > 3 { // under 1e-4: Ruby writes 1.0e-05
			return false
		}
		sig = len(frac) - lead
	} else {
		sig = len(intPart)
		if frac != "0" {
			sig += len(frac)
		} else {
			// "X.0": trailing zeros of the integer part are not significant.
			for i := len(intPart) - 1; i > 0 && intPart[i] == '0'; i-- {
				sig--
			}
		}
	}
	return sig <= 15 && len(intPart) <= 15 // 1e15 and up: 1.0e+15
}
