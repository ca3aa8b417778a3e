package rubyjson

import (
	"strings"
	"unsafe"

	"github.com/gojob/gojob/sidekiq/internal/lazyjson"
)

// The lazy reading of package wire's fetched jobs is this parser's; it
// reaches it through lazyjson, not through this package's API.
func init() {
	lazyjson.Install(&lazyjson.Decoder[Value, *Map]{Scan: scanLazy, Get: lazyGet, String: lazyString, Map: lazyMap})
}

// scanObjectShared checks that data is one JSON object exactly as
// parseObjectShared does (the same errors for the same input) and returns
// it undecoded. data must never be modified afterwards: the strings of
// the values decoded from it share its memory.
func scanObjectShared(data []byte) (*lazyjson.Object, error) {
	l := new(lazyjson.Object)
	if err := scanLazy(l, data); err != nil {
		return nil, err
	}
	return l, nil
}

// scanLazy is scanObjectShared into l, which it resets (an Object inside a
// larger struct costs no allocation of its own). On error l is left empty.
func scanLazy(l *lazyjson.Object, data []byte) error {
	*l = lazyjson.Object{}
	err := scanLazyInto(l, data)
	if err != nil {
		*l = lazyjson.Object{}
	}
	return err
}

func scanLazyInto(l *lazyjson.Object, data []byte) error {
	l.Data, l.Src = data, unsafe.String(unsafe.SliceData(data), len(data))
	l.Members = l.Inline[:0]
	if len(data) > maxLazy {
		return errLazyTooLarge
	}
	p := parser{data: data, src: l.Src}
	p.skipSpace()
	if p.pos >= len(data) {
		return p.errorf("unexpected end of input")
	}
	if data[p.pos] != '{' {
		// Not an object: the error ParseObject gives.
		_, err := parseObjectShared(data)
		return err
	}
	if err := scanLazyObject(l, &p); err != nil {
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

func scanLazyObject(l *lazyjson.Object, p *parser) error {
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
		m := lazyjson.Member{Key: k, Start: int32(start), End: int32(p.pos)}
		if bit := lazyjson.KeyBit(k); l.Keys&bit == 0 {
			l.Members = append(l.Members, m) // a key not seen yet
			l.Keys |= bit
		} else if i := l.Index(k); i >= 0 {
			l.Members[i] = m
		} else {
			l.Members = append(l.Members, m)
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
		n, _, ok := scanNumber(p.data, p.pos)
		if !ok {
			return &SyntaxError{Offset: p.pos, Msg: errNumber.Error()}
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

// lazyGet decodes the value of key k.
func lazyGet(l *lazyjson.Object, k string) (Value, bool) {
	i := l.Index(k)
	if i < 0 {
		return Value{}, false
	}
	m := l.Members[i]
	v, err := parse(l.Data[m.Start:m.End], l.Src[m.Start:m.End])
	if err != nil {
		// Checked by scanObjectShared: cannot happen.
		return Value{}, false
	}
	return v, true
}

// lazyString returns the value of key k when it is a string, without
// decoding anything else: a string with no escapes is a slice of the
// document.
func lazyString(l *lazyjson.Object, k string) (string, bool) {
	i := l.Index(k)
	if i < 0 {
		return "", false
	}
	m := l.Members[i]
	if m.End-m.Start < 2 || l.Data[m.Start] != '"' {
		return "", false
	}
	if s := l.Src[m.Start+1 : m.End-1]; strings.IndexByte(s, '\\') < 0 {
		return s, true // checked by the scan, and nothing to unescape
	}
	p := parser{data: l.Data[:m.End], src: l.Src[:m.End], pos: int(m.Start)}
	s, err := p.str()
	return s, err == nil
}

// lazyMap decodes the whole object into a Map (the object
// parseObjectShared returns).
func lazyMap(l *lazyjson.Object) *Map {
	m, err := parseObjectShared(l.Data)
	if err != nil {
		// Checked by scanObjectShared: cannot happen.
		return NewMap()
	}
	return m
}
