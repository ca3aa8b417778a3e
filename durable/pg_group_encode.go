package durable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The group statement's parameters and answer in PostgreSQL's binary
// format, written and read here rather than through pgx's type map: the
// statement's types never change (text[] and timestamptz[] in, int4, text
// and timestamptz out), and pgx's generic path (an encode plan per array,
// a scan plan per value) cost gojob more CPU per group than the rest of the
// round trip. The formats are those of PostgreSQL's array_recv and
// array_send (src/backend/utils/adt/arrayfuncs.c), textrecv and
// timestamptz_recv (integer microseconds since 2000-01-01 UTC).

const (
	pgOIDInt4        = 23
	pgOIDText        = 25
	pgOIDTimestamptz = 1184

	// pgEpochMicros is 2000-01-01 00:00:00 UTC in Unix microseconds.
	pgEpochMicros = 946684800 * 1_000_000
)

// pgArrayHeader appends a one-dimensional array's header for n elements
// of type elem (an empty array has no dimension).
func pgArrayHeader(buf []byte, n int, elem uint32, hasNull bool) []byte {
	dims, flags := uint32(0), uint32(0)
	if n > 0 {
		dims = 1
	}
	if hasNull {
		flags = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, dims)
	buf = binary.BigEndian.AppendUint32(buf, flags)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	if n > 0 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(n))
		buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	}
	return buf
}

// pgTextArray appends a text[] of the n strings str(i).
func pgTextArray(buf []byte, n int, str func(i int) string) []byte {
	buf = pgArrayHeader(buf, n, pgOIDText, false)
	for i := range n {
		s := str(i)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	return buf
}

// pgTimeArray appends a timestamptz[] of the n times at(i), NULL where at
// returns false.
func pgTimeArray(buf []byte, n int, at func(i int) (time.Time, bool)) []byte {
	hasNull := false
	for i := range n {
		if _, ok := at(i); !ok {
			hasNull = true
			break
		}
	}
	buf = pgArrayHeader(buf, n, pgOIDTimestamptz, hasNull)
	for i := range n {
		t, ok := at(i)
		if !ok {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF) // -1: NULL
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = binary.BigEndian.AppendUint64(buf, uint64(t.UnixMicro()-pgEpochMicros))
	}
	return buf
}

// pgDecodeTimestamptz reads a binary timestamptz.
func pgDecodeTimestamptz(b []byte) (time.Time, error) {
	if len(b) != 8 {
		return time.Time{}, fmt.Errorf("durable: timestamptz of %d bytes", len(b))
	}
	return time.UnixMicro(int64(binary.BigEndian.Uint64(b)) + pgEpochMicros).UTC(), nil
}

// pgDecodeInt4 reads a binary int4.
func pgDecodeInt4(b []byte) (int32, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("durable: int4 of %d bytes", len(b))
	}
	return int32(binary.BigEndian.Uint32(b)), nil
}

// errPGGroupAnswer reports a group statement whose answer has another
// shape than pgGroupSQL's.
var errPGGroupAnswer = errors.New("durable: unexpected answer to the group statement")
