// Package lazyjson is a JSON object that has been checked but not decoded:
// it keeps the document and the span of each top-level member, and the
// value of a member is decoded when it is asked for. Package wire keeps a
// fetched job this way: a job that runs and succeeds is read by key a few
// times (class, jid, args) and never re-encoded, so decoding every member
// up front, and allocating the values, is mostly wasted.
//
// The checking and decoding are package rubyjson's parser, which installs
// them here when it initializes (Install): the parser stays unexported in
// rubyjson, and an Object can be a field of a larger struct (wire.Job)
// without an allocation of its own.
package lazyjson

import "unsafe"

// Object is a checked JSON object: Data and the spans of its members.
// Reading an Object keeps nothing, so it is safe to read from several
// goroutines.
type Object struct {
	// Data is the document.
	Data []byte
	// Members are in order of first appearance (a repeated key keeps its
	// first position and its last value, as rubyjson.ParseObject does);
	// Inline holds the first eight without an allocation of their own:
	// the keys of a job as Sidekiq and ActiveJob push it (a retried job's
	// error fields take one more allocation, on the retry path).
	Members []Member
	Inline  [8]Member
	// escaped holds the keys written with escapes, decoded (Member.KeyStart
	// < 0); nil for the others, all of a job's.
	escaped *[]string
	// Keys has the KeyBit of every member's key set, so that Index finds
	// most absent keys (a job's unique_for, timeout, wrapped…) without a
	// comparison. 0 when the object was built without it: Index then
	// compares every key.
	Keys uint64
}

// Text is Data as a string sharing its memory.
func (o *Object) Text() string { return unsafe.String(unsafe.SliceData(o.Data), len(o.Data)) }

// KeyBit is k's bit in Object.Keys: one of 64, from its length and three
// of its bytes.
func KeyBit(k string) uint64 {
	n := len(k)
	if n == 0 {
		return 1
	}
	h := uint(n)*31 + uint(k[0])
	h = h*31 + uint(k[n-1])
	h = h*31 + uint(k[n/2])
	return 1 << (h & 63)
}

// Member is a top-level key and the span of its value in Data: offsets,
// not strings, so that an Object holds no pointer per member (the
// collector scans none, writing one needs no barrier) and a member takes
// 16 bytes. The key is Data[KeyStart:KeyEnd], the text between its
// quotes; a key written with escapes is the decoded string at index
// KeyEnd of the object's escaped keys, with KeyStart -1.
type Member struct {
	KeyStart, KeyEnd int32
	Start, End       int32
}

// Key returns the key of member i.
func (o *Object) Key(i int) string {
	m := &o.Members[i]
	if m.KeyStart < 0 {
		return (*o.escaped)[m.KeyEnd]
	}
	return o.Text()[m.KeyStart:m.KeyEnd]
}

// Index returns the position of key k, or -1.
func (o *Object) Index(k string) int {
	if o.Keys != 0 && o.Keys&KeyBit(k) == 0 {
		return -1
	}
	for i := range o.Members {
		if o.Key(i) == k {
			return i
		}
	}
	return -1
}

// Add adds a member as the scan finds it, with its key k and the spans
// in m: a repeated key keeps its first position and takes m's value.
// When the key's text in Data is not k (it has escapes), m.KeyStart must
// be negative and k is kept apart.
func (o *Object) Add(k string, m Member) {
	if m.KeyStart < 0 {
		if o.escaped == nil {
			o.escaped = new([]string)
		}
		m.KeyEnd = int32(len(*o.escaped))
		*o.escaped = append(*o.escaped, k)
	}
	if bit := KeyBit(k); o.Keys&bit == 0 {
		o.Members = append(o.Members, m) // a key not seen yet
		o.Keys |= bit
	} else if i := o.Index(k); i >= 0 {
		o.Members[i].Start, o.Members[i].End = m.Start, m.End
	} else {
		o.Members = append(o.Members, m)
	}
}

// Len returns the number of keys.
func (o *Object) Len() int { return len(o.Members) }

// Has reports whether the object has key k.
func (o *Object) Has(k string) bool { return o.Index(k) >= 0 }

// Decoder is the parser's side, for decoded values of type V and decoded
// objects of type M (rubyjson.Value and *rubyjson.Map).
type Decoder[V, M any] struct {
	// Scan checks that data is one JSON object exactly as
	// rubyjson.ParseObject does (the same errors for the same input) and
	// resets o to it; on error o is left empty. data must never be
	// modified afterwards: the strings decoded from it share its memory.
	Scan func(o *Object, data []byte) error
	// Get decodes the value of key k.
	Get func(o *Object, k string) (V, bool)
	// String returns the value of key k when it is a string, without
	// decoding anything else.
	String func(o *Object, k string) (string, bool)
	// Map decodes the whole object.
	Map func(o *Object) M
}

var installed any

// Install makes d the decoder Installed returns. Package rubyjson calls it
// when it initializes, before any package that imports rubyjson does.
func Install[V, M any](d *Decoder[V, M]) { installed = d }

// Installed returns the decoder installed for V and M; it panics when
// there is none.
func Installed[V, M any]() *Decoder[V, M] { return installed.(*Decoder[V, M]) }
