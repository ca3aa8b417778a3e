package rubyjson

import (
	"encoding/binary"
	"math/bits"
	"testing"
)

// special8 finds a quote, a backslash or a control character at any of the
// eight positions, next to any other byte, and nothing else; its lowest
// set bit is the first of them.
func TestSpecial8FindsExactlyTheBytesThatEndTheFastPath(t *testing.T) {
	check := func(b [8]byte) {
		t.Helper()
		first := -1
		for i, x := range b {
			if x == '"' || x == '\\' || x < 0x20 {
				first = i
				break
			}
		}
		m := special8(binary.LittleEndian.Uint64(b[:]))
		if (m != 0) != (first >= 0) {
			t.Fatalf("special8(%q) = %#x, want a special byte: %v", b, m, first >= 0)
		}
		if m != 0 && bits.TrailingZeros64(m)/8 != first {
			t.Fatalf("special8(%q) marks byte %d first, want %d", b, bits.TrailingZeros64(m)/8, first)
		}
	}
	for _, fill := range []byte{'a', 0x20, 0x21, 0x7f, 0x80, 0xc3, 0xff, '"' + 1, '\\' - 1} {
		for pos := range 8 {
			for c := range 256 {
				var b [8]byte
				for i := range b {
					b[i] = fill
				}
				b[pos] = byte(c)
				check(b)
			}
		}
	}
	// Two bytes set: a borrow from the first must not hide it or move it.
	edge := []byte{0x00, 0x01, 0x1f, 0x20, '"', '"' + 1, '\\', '\\' + 1, 0x7f, 0x80, 0xff, 'a'}
	for i := range 8 {
		for j := i + 1; j < 8; j++ {
			for _, x := range edge {
				for _, y := range edge {
					b := [8]byte{'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'}
					b[i], b[j] = x, y
					check(b)
				}
			}
		}
	}
}
