package wire_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// FuzzJobRoundTrip checks that decoding and re-encoding is stable: whatever
// ParseJob accepts re-encodes to a canonical form (what Ruby's JSON.generate
// writes) that decodes to the same value and re-encodes to the same bytes, and
// an unchanged job hands back its original bytes. Ruby-written payloads are
// canonical, so they round-trip byte for byte (the seeds include captured
// ones). The corpus is in testdata/fuzz/FuzzJobRoundTrip.
func FuzzJobRoundTrip(f *testing.F) {
	for _, s := range []string{
		`{"retry":true,"queue":"default","args":[1,"two",{"three":3.5}],"class":"HardJob","jid":"2192851646718f18b780163c","created_at":1795296573.1651707,"enqueued_at":1795296573.165405}`,
		`{"retry":2,"queue":"default","backtrace":3,"args":[42],"class":"FailJob","jid":"9e8c00000000000000000000","created_at":1795296573.166795,"enqueued_at":1795296573.1668046,"error_message":"boom é","error_class":"ArgumentError","failed_at":1795296576.258805,"retry_count":0,"error_backtrace":"eJy1zdEKgjAU\n"}`,
		`{"retry":true,"queue":"default","class":"X","args":[1.0e+16,1.5e-07,-0.0,123456789012345678901234567890,"\u0000\u001f\"\\\n","\u2028/<>&😀"],"jid":"a","created_at":1795296573166,"enqueued_at":1795296573166}`,
		`{"a":1,"a":2}`, `{"x":1E3,"y":[],"z":{}}`, `{"s":"\ud83d\ude00\/"}`, `[]`, `1e400`,
	} {
		f.Add([]byte(s))
	}
	// Every payload captured from Ruby is a seed too.
	files, _ := filepath.Glob("../../testdata/ruby-fixtures/*/*.json")
	if len(files) == 0 {
		f.Fatal("no fixture payloads found to seed the corpus")
	}
	for _, file := range files {
		if filepath.Base(file) == "manifest.json" {
			continue
		}
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := wire.ParseJob(data)
		if err != nil {
			return
		}
		if !bytes.Equal(job.Bytes(), data) {
			t.Fatalf("unchanged job did not return its raw bytes")
		}
		enc := job.Map().Encode()
		again, err := wire.ParseJob(enc)
		if err != nil {
			t.Fatalf("re-encoded job does not parse: %v\n%s", err, enc)
		}
		if enc2 := again.Map().Encode(); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
		v1, err := rubyjson.Parse(data)
		if err != nil {
			t.Fatalf("ParseJob accepted what Parse rejects: %v\n%s", err, data)
		}
		v2, _ := rubyjson.Parse(enc)
		if !rubyjson.Equal(v1, v2) {
			t.Fatalf("value changed through a round trip:\n%s\n%s", data, enc)
		}
		// The object decoder behind ParseJob and the generic decoder agree
		// on the canonical form, and so does a deep copy.
		if generic := v1.Encode(); !bytes.Equal(generic, enc) {
			t.Fatalf("decoders disagree:\n%s\n%s", generic, enc)
		}
		if clone := job.Clone().Bytes(); !bytes.Equal(clone, enc) {
			t.Fatalf("a clone encodes differently:\n%s\n%s", clone, enc)
		}
	})
}
