package rubyjson

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"
)

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

// parseObjectShared is ParseObject without the copy: the strings and number
// texts of the result share data's memory, so data must never be modified
// afterwards. It is for buffers the caller owns and keeps as they are, such
// as a payload fresh from a Redis reply that is kept as the job's exact
// bytes (the copy is a fifth of a typical payload's parse).
func parseObjectShared(data []byte) (*Map, error) {
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
	if p.pos < len(p.data) && p.data[p.pos] > ' ' {
		return // the common case: no whitespace between tokens
	}
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
		k, err := p.memberKey()
		if err != nil {
			return Value{}, err
		}
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

// memberKey reads an object member's key and the ':' after it, up to its
// value.
func (p *parser) memberKey() (string, error) {
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return "", p.errorf("expected an object key")
	}
	k, err := p.key()
	if err != nil {
		return "", err
	}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return "", p.errorf("expected ':'")
	}
	p.pos++
	p.skipSpace()
	return k, nil
}
