package rubyjson

import (
	"encoding/binary"
	"testing"
)

// special8 finds a quote, a backslash or a control character at any of the
// eight positions, next to any other byte, and nothing else.
func TestSpecial8FindsExactlyTheBytesThatEndTheFastPath(t *testing.T) {
	for _, fill := range []byte{'a', 0x20, 0x21, 0x7f, 0x80, 0xc3, 0xff, '"' + 1, '\\' - 1} {
		for pos := range 8 {
			for c := range 256 {
				var b [8]byte
				for i := range b {
					b[i] = fill
				}
				b[pos] = byte(c)
				want := false
				for _, x := range b {
					if x == '"' || x == '\\' || x < 0x20 {
						want = true
					}
				}
				if got := special8(binary.LittleEndian.Uint64(b[:])); got != want {
					t.Fatalf("special8(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
}
