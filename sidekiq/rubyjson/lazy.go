package rubyjson

import (
	"unsafe"
)

// Lazy is a JSON object that has been checked but not decoded: the text
// of each of its top-level values is decoded when it is asked for. A
// fetched job is read by key a few times (class, jid, args) and rarely
// re-encoded, so decoding every member of it up front, and allocating the
// values, is mostly wasted. Get decodes again on every call and keeps
// nothing, so a Lazy is safe to read from several goroutines.
type Lazy struct {
	data []byte
	src  string // data as a string, shared
	// members in order of first appearance (a repeated key keeps its
	// first position and its last value, as ParseObject does); inline
	// holds the first few without an allocation of their own.
	members []lazyMember
	inline  [12]lazyMember
}

// lazyMember is a top-level key and the span of its value in data.
type lazyMember struct {
	key        string
	start, end int32
}

// ScanObjectShared checks that data is one JSON object exactly as
// ParseObjectShared does (the same errors for the same input) and returns
// it undecoded. data must never be modified afterwards: the strings of
// the values decoded from it share its memory.
func ScanObjectShared(data []byte) (*Lazy, error) {
	l := new(Lazy)
	if err := l.Scan(data); err != nil {
		return nil, err
	}
	return l, nil
}

// Scan is ScanObjectShared into l, which it resets (a Lazy inside a larger
// struct costs no allocation of its own). On error l is left empty.
func (l *Lazy) Scan(data []byte) error {
	*l = Lazy{}
	err := l.scan(data)
	if err != nil {
		*l = Lazy{}
	}
	return err
}

func (l *Lazy) scan(data []byte) error {
	l.data, l.src = data, unsafe.String(unsafe.SliceData(data), len(data))
	l.members = l.inline[:0]
	if len(data) > maxLazy {
		return errLazyTooLarge
	}
	p := parser{data: data, src: l.src}
	p.skipSpace()
	if p.pos >= len(data) {
		return p.errorf("unexpected end of input")
	}
	if data[p.pos] != '{' {
		// Not an object: the error ParseObject gives.
		_, err := ParseObjectShared(data)
		return err
	}
	if err := l.scanObject(&p); err != nil {
		return err
	}
	p.skipSpace()
	if p.pos != len(data) {
		return p.errorf("unexpected data after the value")
	}
	return nil
}

// maxLazy bounds a lazily decoded document (spans are int32).
const maxLazy = 1 << 30

var errLazyTooLarge = &SyntaxError{Msg: "document too large"}

func (l *Lazy) scanObject(p *parser) error {
	p.pos++ // {
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return p.errorf("expected an object key")
		}
		k, err := p.key()
		if err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return p.errorf("expected ':'")
		}
		p.pos++
		p.skipSpace()
		start := p.pos
		if err := p.skip(1); err != nil {
			return err
		}
		m := lazyMember{key: k, start: int32(start), end: int32(p.pos)}
		if i := l.index(k); i >= 0 {
			l.members[i] = m
		} else {
			l.members = append(l.members, m)
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.errorf("unexpected end of input in object")
		}
		if p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.data[p.pos] == '}' {
			p.pos++
			return nil
		}
		return p.errorf("expected ',' or '}'")
	}
}

// skip checks the value at p.pos and moves past it, as value would decode
// it, without building it.
func (p *parser) skip(depth int) error {
	if p.pos >= len(p.data) {
		return p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		if depth >= maxDepth {
			return p.errorf("nesting of %d is too deep", depth+1)
		}
		return p.skipContainer(depth+1, '}', true)
	case c == '[':
		if depth >= maxDepth {
			return p.errorf("nesting of %d is too deep", depth+1)
		}
		return p.skipContainer(depth+1, ']', false)
	case c == '"':
		_, err := p.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		_, n, err := parseNumberIn(p.data, p.src, p.pos)
		if err != nil {
			return err
		}
		p.pos = n
		return nil
	case c == 't':
		_, err := p.literal("true", Value{})
		return err
	case c == 'f':
		_, err := p.literal("false", Value{})
		return err
	case c == 'n':
		_, err := p.literal("null", Value{})
		return err
	}
	return p.errorf("unexpected character %q", p.data[p.pos])
}

// skipContainer checks an object (keyed) or an array and moves past it.
func (p *parser) skipContainer(depth int, end byte, keyed bool) error {
	p.pos++ // { or [
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == end {
		p.pos++
		return nil
	}
	for {
		p.skipSpace()
		if keyed {
			if p.pos >= len(p.data) || p.data[p.pos] != '"' {
				return p.errorf("expected an object key")
			}
			if _, err := p.key(); err != nil {
				return err
			}
			p.skipSpace()
			if p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return p.errorf("expected ':'")
			}
			p.pos++
			p.skipSpace()
		}
		if err := p.skip(depth); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			if keyed {
				return p.errorf("unexpected end of input in object")
			}
			return p.errorf("unexpected end of input in array")
		}
		if p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.data[p.pos] == end {
			p.pos++
			return nil
		}
		if keyed {
			return p.errorf("expected ',' or '}'")
		}
		return p.errorf("expected ',' or ']'")
	}
}

func (l *Lazy) index(k string) int {
	for i := range l.members {
		if l.members[i].key == k {
			return i
		}
	}
	return -1
}

// Len returns the number of keys.
func (l *Lazy) Len() int { return len(l.members) }

// Has reports whether the object has key k.
func (l *Lazy) Has(k string) bool { return l.index(k) >= 0 }

// Get decodes the value of key k.
func (l *Lazy) Get(k string) (Value, bool) {
	i := l.index(k)
	if i < 0 {
		return Value{}, false
	}
	m := l.members[i]
	v, err := parse(l.data[m.start:m.end], l.src[m.start:m.end])
	if err != nil {
		// Checked by ScanObjectShared: cannot happen.
		return Value{}, false
	}
	return v, true
}

// String returns the value of key k when it is a string, without decoding
// anything else: a string with no escapes is a slice of the document.
func (l *Lazy) String(k string) (string, bool) {
	i := l.index(k)
	if i < 0 {
		return "", false
	}
	m := l.members[i]
	if m.end-m.start < 2 || l.data[m.start] != '"' {
		return "", false
	}
	p := parser{data: l.data[:m.end], src: l.src[:m.end], pos: int(m.start)}
	s, err := p.str()
	return s, err == nil
}

// Map decodes the whole object into a Map (the object ParseObjectShared
// returns).
func (l *Lazy) Map() *Map {
	m, err := ParseObjectShared(l.data)
	if err != nil {
		// Checked by ScanObjectShared: cannot happen.
		return NewMap()
	}
	return m
}
