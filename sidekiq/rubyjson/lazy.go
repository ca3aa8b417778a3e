package rubyjson

import (
	"strings"

	"github.com/gojob/gojob/sidekiq/internal/lazyjson"
)

// The lazy reading of package wire's fetched jobs is this parser's; it
// reaches it through lazyjson, not through this package's API.
func init() {
	lazyjson.Install(&lazyjson.Decoder[Value, *Map]{Scan: scanLazy, Get: lazyGet, String: lazyString, Map: lazyMap})
}

// scanLazy checks that data is one JSON object exactly as
// parseObjectShared does (the same errors for the same input) and keeps it
// undecoded in l, which it resets (an Object inside a larger struct costs
// no allocation of its own). On error l is left empty. data must never be
// modified afterwards: the strings of the values decoded from it share its
// memory.
func scanLazy(l *lazyjson.Object, data []byte) error {
	*l = lazyjson.Object{}
	err := scanLazyInto(l, data)
	if err != nil {
		*l = lazyjson.Object{}
	}
	return err
}

func scanLazyInto(l *lazyjson.Object, data []byte) error {
	l.Data = data
	l.Members = l.Inline[:0]
	if len(data) > maxLazy {
		return errLazyTooLarge
	}
	p := parser{data: data, src: l.Text()}
	p.skipSpace()
	if p.pos >= len(data) {
		return p.errorf("unexpected end of input")
	}
	if data[p.pos] != '{' {
		// Not an object: the error ParseObject gives.
		_, err := parseObjectShared(data)
		return err
	}
	if start := p.pos; !scanFlat(l, &p) {
		// Something the fast path leaves alone: scan it all again.
		*l = lazyjson.Object{Data: data}
		l.Members = l.Inline[:0]
		p.pos = start
		if err := scanLazyObject(l, &p); err != nil {
			return err
		}
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

// scanFlat is scanLazyObject for the objects jobs are made of: no
// whitespace, keys and strings without escapes, containers only as
// values (skipped by skip). It keeps the position in a local variable
// rather than in the parser, which roughly halves the scan of a job. It
// returns false at anything else, valid or not (whitespace, an escape, an
// error); the caller then scans again with scanLazyObject, which alone
// reports errors, so the two cannot disagree on one.
func scanFlat(l *lazyjson.Object, p *parser) bool {
	data, n := p.data, len(p.data)
	pos := p.pos + 1 // {
	if pos < n && data[pos] == '}' {
		p.pos = pos + 1
		return true
	}
	for {
		if pos >= n || data[pos] != '"' {
			return false
		}
		ke := specialAt(data, pos+1)
		if ke >= n || data[ke] != '"' {
			return false // an escape, a control character, the end
		}
		k := p.src[pos+1 : ke]
		ks := pos + 1
		pos = ke + 1
		if pos+1 >= n || data[pos] != ':' {
			return false
		}
		pos++
		start := pos
		switch c := data[pos]; {
		case c == '"':
			e := specialAt(data, pos+1)
			if e >= n || data[e] != '"' {
				return false
			}
			pos = e + 1
		case c == '-' || c-'0' <= 9:
			e, _, ok := scanNumber(data, pos)
			if !ok {
				return false
			}
			pos = e
		case c == '[' || c == '{':
			p.pos = pos
			if p.skip(1) != nil {
				return false
			}
			pos = p.pos
		case c == 't' && n-pos >= 4 && string(data[pos:pos+4]) == "true",
			c == 'n' && n-pos >= 4 && string(data[pos:pos+4]) == "null":
			pos += 4
		case c == 'f' && n-pos >= 5 && string(data[pos:pos+5]) == "false":
			pos += 5
		default:
			return false
		}
		l.Add(k, lazyjson.Member{KeyStart: int32(ks), KeyEnd: int32(ke), Start: int32(start), End: int32(pos)})
		if pos >= n {
			return false
		}
		switch data[pos] {
		case ',':
			pos++
		case '}':
			p.pos = pos + 1
			return true
		default:
			return false
		}
	}
}

func scanLazyObject(l *lazyjson.Object, p *parser) error {
	p.pos++ // {
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return nil
	}
	for {
		p.skipSpace()
		ks := p.pos + 1 // after the key's opening quote
		k, err := p.memberKey()
		if err != nil {
			return err
		}
		start := p.pos
		if err := p.skip(1); err != nil {
			return err
		}
		m := lazyjson.Member{KeyStart: -1, Start: int32(start), End: int32(p.pos)}
		if ke := ks + len(k); ke < len(p.data) && p.data[ke] == '"' && p.src[ks:ke] == k {
			m.KeyStart, m.KeyEnd = int32(ks), int32(ke) // written without escapes
		}
		l.Add(k, m)
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
			if _, err := p.memberKey(); err != nil {
				return err
			}
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
	v, err := parse(l.Data[m.Start:m.End], l.Text()[m.Start:m.End])
	if err != nil {
		// Checked by scanLazy: cannot happen.
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
	src := l.Text()
	if s := src[m.Start+1 : m.End-1]; strings.IndexByte(s, '\\') < 0 {
		return s, true // checked by the scan, and nothing to unescape
	}
	p := parser{data: l.Data[:m.End], src: src[:m.End], pos: int(m.Start)}
	s, err := p.str()
	return s, err == nil
}

// lazyMap decodes the whole object into a Map (the object
// parseObjectShared returns).
func lazyMap(l *lazyjson.Object) *Map {
	m, err := parseObjectShared(l.Data)
	if err != nil {
		// Checked by scanLazy: cannot happen.
		return NewMap()
	}
	return m
}
