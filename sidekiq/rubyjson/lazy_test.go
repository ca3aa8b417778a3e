package rubyjson

import (
	"strings"
	"testing"

	"github.com/gojob/gojob/sidekiq/internal/lazyjson"
)

// A lazily scanned object accepts and refuses exactly what ParseObject
// does, with the same error, and decodes each member to the value
// ParseObject gives it (a repeated key: first position, last value).
func TestLazyAgreesWithParseObject(t *testing.T) {
	docs := []string{
		`{}`, ` { } `, `{"a":1}`, `{"a":1,"b":[1,2,{"c":"d"}],"e":"f\u00e9\n","g":null,"h":true,"i":false,"j":-1.5e3}`,
		`{"a":1,"a":2}`, `{"k":{"x":{"y":[[[]]]}}}`, `{"s":"` + strings.Repeat("x", 3000) + `\"q\""}`,
		`{"class":"Job","args":[1,"two",{"three":3}],"jid":"0123456789abcdef01234567","retry":true}`,
		// Left by scanFlat part way, accepted.
		`{"a":1,"b" :2}`, `{"a":1 }`, `{"a\u0062":1,"c":"d"}`, `{"a":"x","b":"\\y"}`, `{"a":1,"a":2,"b":[1],"a":3}`,
		`{"t":true,"f":false,"n":null,"z":0,"m":-0.5e-3,"o":{},"l":[]}`, `{"long":"` + strings.Repeat("y", 17) + `\u00e9"}`,
		// Keys written with escapes (kept decoded apart), repeated in both
		// spellings; more members than an Object holds inline.
		`{"a\u0062":1,"ab":2,"c":3}`, `{"ab":1,"a\u0062":2}`, `{"a\"b":1,"\\":2,"":3,"x\\":4}`,
		`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k\u0031":10,"k10":11}`,
		// Refused.
		``, `[]`, `"s"`, `1`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1]`, `{"a":[1,}`, `{"a":"` + "\x01" + `"}`,
		`{"a":tru}`, `{"a":01}`, `{"a":1} x`, `{"a":"\u12"}`, `{"a":` + strings.Repeat("[", 101) + strings.Repeat("]", 101) + `}`,
		`{a:1}`, `{"a":1 "b":2}`, `{"a":-}`,
		`{"a":1,"b":nul}`, `{"a":fals}`, `{"a":"x` + "\n" + `y"}`, `{"a":"` + strings.Repeat("z", 20), `{"a":`, `{"a":1`,
		`{"a":1,"b":[1,2}`, `{"a":"x"]`, `{"abcdefghijklmnop`, `{"a":truex}`,
	}
	for _, d := range docs {
		want, werr := parseObjectShared([]byte(d))
		l, err := scanObjectShared([]byte(d))
		if (werr == nil) != (err == nil) || (werr != nil && werr.Error() != err.Error()) {
			t.Fatalf("%.60q: ParseObject error %v, ScanObject error %v", d, werr, err)
		}
		if werr != nil {
			continue
		}
		if l.Len() != want.Len() {
			t.Fatalf("%.60q: %d members, want %d", d, l.Len(), want.Len())
		}
		for i := range want.Len() {
			k, wv := want.At(i)
			v, ok := lazyGet(l, k)
			if !ok || string(v.appendTo(nil)) != string(wv.appendTo(nil)) {
				t.Fatalf("%.60q: %s = %s, want %s", d, k, v.appendTo(nil), wv.appendTo(nil))
			}
			if s, ok := wv.Str(); ok {
				if got, ok := lazyString(l, k); !ok || got != s {
					t.Fatalf("%.60q: String(%s) = %q, %v", d, k, got, ok)
				}
			} else if _, ok := lazyString(l, k); ok {
				t.Fatalf("%.60q: String(%s) of a %s", d, k, wv.Kind())
			}
			if l.Index(k) != i {
				t.Fatalf("%.60q: %s at %d, want %d", d, k, l.Index(k), i)
			}
		}
		if string(lazyMap(l).Encode()) != string(want.Encode()) {
			t.Fatalf("%.60q: Map differs", d)
		}
	}
}

// FuzzLazyAgreesWithParseObject checks the same on any input.
func FuzzLazyAgreesWithParseObject(f *testing.F) {
	f.Add(`{"class":"Job","args":[1,"two"],"jid":"x"}`)
	f.Add(`{"a":{"b":[1.0e10,-0,"\ud83d\ude00"]}}`)
	f.Fuzz(func(t *testing.T, d string) {
		want, werr := parseObjectShared([]byte(d))
		l, err := scanObjectShared([]byte(d))
		if (werr == nil) != (err == nil) || (werr != nil && werr.Error() != err.Error()) {
			t.Fatalf("ParseObject error %v, ScanObject error %v", werr, err)
		}
		if werr != nil {
			return
		}
		if string(lazyMap(l).Encode()) != string(want.Encode()) {
			t.Fatal("Map differs")
		}
		for i := range want.Len() {
			k, wv := want.At(i)
			v, _ := lazyGet(l, k)
			if string(v.appendTo(nil)) != string(wv.appendTo(nil)) {
				t.Fatalf("%s differs", k)
			}
		}
	})
}

// Index finds every key an object has and none it lacks, including keys
// that share a filter bit with one it has (lazyjson.Object.Keys).
func TestLazyIndexMissesAbsentKeys(t *testing.T) {
	keys := []string{"class", "args", "retry", "queue", "jid", "created_at", "enqueued_at", "wrapped", "unique_for",
		"unique_until", "timeout", "heartbeat_timeout", "bid", "tags", "retry_count", "failed_at", "error_message", "", "a", "b"}
	for n := 0; n <= len(keys); n++ {
		var doc strings.Builder
		doc.WriteString("{")
		for i, k := range keys[:n] {
			if i > 0 {
				doc.WriteString(",")
			}
			doc.WriteString(`"` + k + `":1`)
		}
		doc.WriteString("}")
		l, err := scanObjectShared([]byte(doc.String()))
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			want := -1
			if i < n {
				want = i
			}
			if got := l.Index(k); got != want {
				t.Fatalf("%d keys: Index(%q) = %d, want %d", n, k, got, want)
			}
		}
	}
}

// scanObjectShared is scanLazy into a new Object, nil on error.
func scanObjectShared(data []byte) (*lazyjson.Object, error) {
	l := new(lazyjson.Object)
	if err := scanLazy(l, data); err != nil {
		return nil, err
	}
	return l, nil
}
