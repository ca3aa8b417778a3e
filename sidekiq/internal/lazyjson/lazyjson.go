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

// Object is a checked JSON object: Data and the spans of its members.
// Reading an Object keeps nothing, so it is safe to read from several
// goroutines.
type Object struct {
	// Data is the document; Src is Data as a string sharing its memory.
	Data []byte
	Src  string
	// Members are in order of first appearance (a repeated key keeps its
	// first position and its last value, as rubyjson.ParseObject does);
	// Inline holds the first eight without an allocation of their own:
	// the keys of a job as Sidekiq and ActiveJob push it (a retried job's
	// error fields take one more allocation, on the retry path).
	Members []Member
	Inline  [8]Member
	// Keys has the KeyBit of every member's key set, so that Index finds
	// most absent keys (a job's unique_for, timeout, wrapped…) without a
	// comparison. 0 when the object was built without it: Index then
	// compares every key.
	Keys uint64
}

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

// Member is a top-level key and the span of its value in Data.
type Member struct {
	Key        string
	Start, End int32
}

// Index returns the position of key k, or -1.
func (o *Object) Index(k string) int {
	if o.Keys != 0 && o.Keys&KeyBit(k) == 0 {
		return -1
	}
	for i := range o.Members {
		if o.Members[i].Key == k {
			return i
		}
	}
	return -1
}

// Add adds member m as the scan finds it: a repeated key keeps its first
// position and takes m's value.
func (o *Object) Add(m Member) {
	if bit := KeyBit(m.Key); o.Keys&bit == 0 {
		o.Members = append(o.Members, m) // a key not seen yet
		o.Keys |= bit
	} else if i := o.Index(m.Key); i >= 0 {
		o.Members[i] = m
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
