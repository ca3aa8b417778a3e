package rubyjson_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// TestParseObjectSharedDecodesAsParseObject: the shared form gives the same
// values and errors as the copying one.
func TestParseObjectSharedDecodesAsParseObject(t *testing.T) {
	docs := []string{
		`{"retry":true,"queue":"default","class":"BenchJob","args":[7],"jid":"90d9c26b6665a3d4675fced3","created_at":1795492991.0632136,"enqueued_at":1795492991.0633917}`,
		`{"a":[1,"two",{"three":3.5,"é":[null,true,1.0e+16]}],"b":"\u00e9\n\"x\"","a":-0.0,"c":12345678901234567890}`,
		`{}`, ` { "k" : [ ] } `,
		`[1,2]`, `{"a":}`, `{"a":1} x`, `nope`,
	}
	for _, doc := range docs {
		want, wantErr := rubyjson.ParseObject([]byte(doc))
		got, gotErr := rubyjson.ParseObjectShared([]byte(doc))
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("%s: error %v, want %v", doc, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %#v, want %#v", doc, got, want)
		}
		if got != nil && string(got.Encode()) != string(want.Encode()) {
			t.Fatalf("%s: encodes as %s, want %s", doc, got.Encode(), want.Encode())
		}
	}
}

// TestParseObjectSharedReadsTheCallersBuffer pins the contract: the result
// shares the buffer (which is why the buffer must not change afterwards).
func TestParseObjectSharedReadsTheCallersBuffer(t *testing.T) {
	buf := []byte(`{"class":"Aaaa"}`)
	m, err := rubyjson.ParseObjectShared(buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf[strings.Index(string(buf), "Aaaa"):], "Bbbb")
	v, _ := m.Get("class")
	if s, _ := v.Str(); s != "Bbbb" {
		t.Fatalf("class %q: the result does not share the buffer", s)
	}
}
