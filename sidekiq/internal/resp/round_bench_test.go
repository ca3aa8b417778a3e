package resp

import (
	"strings"
	"testing"
)

// BenchmarkRound writes one fetch round, 16 moves and 16 acknowledgements
// by value of 100-byte jobs, on a corked connection to a sink: through
// redigo's Send, as a connection that is not corkable does, and encoded
// (the moves' commands made once per list, as the fetch keeps them).
func BenchmarkRound(b *testing.B) {
	const list, queue = "working:queue:default:host:1:0a1b2c3d000001", "queue:default"
	payload := []byte(`{"class":"NoOp","args":["` + strings.Repeat("x", 60) + `"],"jid":"0123456789abcdef01234567"}`)
	b.Run("redigo", func(b *testing.B) {
		c, _ := dialSink(b)
		b.ReportAllocs()
		for b.Loop() {
			k := Cork(c)
			for range 16 {
				c.Send("LREM", list, -1, payload)
			}
			for range 16 {
				c.Send("LMOVE", queue, list, "RIGHT", "LEFT")
			}
			if err := c.Flush(); err != nil {
				b.Fatal(err)
			}
			if err := k.Uncork(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		c, _ := dialSink(b)
		rw, ok := Raw(c)
		if !ok {
			b.Fatal("not a raw writer")
		}
		move := AppendCmd(nil, "LMOVE", queue, list, "RIGHT", "LEFT")
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			for range 16 {
				buf = AppendLREM(buf, list, payload)
			}
			for range 16 {
				buf = append(buf, move...)
			}
			if err := rw.WriteRaw(buf); err != nil {
				b.Fatal(err)
			}
			buf = KeepBuf(buf)
		}
	})
}
