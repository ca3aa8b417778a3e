package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// writeGroup writes a group with pgGroupSQL on a group connection. Its
// arrays are encoded here (pgTextArray, pgTimeArray) and its answer read
// here: through pgx's type map (an encode plan per array, a scan per
// value) the statement costs gojob about 100 µs more CPU per group
// (BenchmarkGroupStatement: a quarter of the client's CPU per statement),
// as much as the rest of the round trip.
func (d *pgDialect) writeGroup(ctx context.Context, s *sqlStore, ops []*Op) error {
	g := splitGroupPG(ops)
	ups, lcks, dels := g.ups, g.lcks, g.dels
	// The 14 arrays in one buffer, each parameter a piece of it (a piece
	// cut before the buffer grew keeps the old array, with its bytes).
	buf := make([]byte, 0, 14*20+len(ups)*256+len(lcks)*96+len(dels)*80)
	params := make([][]byte, 0, 14)
	text := func(n int, str func(i int) string) {
		from := len(buf)
		buf = pgTextArray(buf, n, str)
		params = append(params, buf[from:len(buf):len(buf)])
	}
	times := func(n int, at func(i int) (time.Time, bool)) {
		from := len(buf)
		buf = pgTimeArray(buf, n, at)
		params = append(params, buf[from:len(buf):len(buf)])
	}
	text(len(ups), func(i int) string { return ups[i].up.JobID })
	text(len(ups), func(i int) string { return ups[i].up.JobClass })
	text(len(ups), func(i int) string { return ups[i].up.ItemJSON })
	text(len(ups), func(i int) string { return ups[i].up.Queue })
	times(len(ups), func(i int) (time.Time, bool) { return ups[i].up.InsertedAt, true })
	times(len(ups), func(i int) (time.Time, bool) { return ups[i].up.AssumeDeadAt, true })
	times(len(ups), func(i int) (time.Time, bool) {
		if m := ups[i].up.MissingAt; m != nil {
			return *m, true
		}
		return time.Time{}, false
	})
	text(len(lcks), func(i int) string { return lcks[i].lk.JobID })
	text(len(lcks), func(i int) string { return lcks[i].lk.LockedBy })
	times(len(lcks), func(i int) (time.Time, bool) { return lcks[i].lk.LockedAt, true })
	times(len(lcks), func(i int) (time.Time, bool) { return lcks[i].lk.AssumeDeadAt, true })
	text(len(dels), func(i int) string { return dels[i].del.JobID })
	from := len(buf)
	buf = pgTextArrayNull(buf, len(dels), func(i int) (string, bool) { return dels[i].del.LockedBy, !dels[i].anyLock })
	params = append(params, buf[from:len(buf):len(buf)])
	times(len(dels), func(i int) (time.Time, bool) { return dels[i].del.LockedAt, true })
	s.counted(1)
	return d.groupExec(ctx, params, func(vals [][]byte) error {
		if len(vals) != 4 {
			return errPGGroupAnswer
		}
		kind, err := pgDecodeInt4(vals[0])
		if err != nil {
			return err
		}
		if kind == int32(opLock) || kind == int32(opDelete) {
			i, err := pgDecodeInt8(vals[3])
			if err != nil {
				return err
			}
			list := lcks
			if kind == int32(opDelete) {
				list = dels
			}
			if i < 1 || i > int64(len(list)) {
				return errPGGroupAnswer
			}
			list[i-1].ok = true
			return nil
		}
		op := g.byJID[string(vals[1])]
		if op == nil || op.kind != opUpsert {
			return nil
		}
		if vals[2] != nil {
			inserted, err := pgDecodeTimestamptz(vals[2])
			if err != nil {
				return err
			}
			op.ok = inserted.Equal(Micro(op.up.InsertedAt))
		}
		return nil
	})
}

// groupExec runs the group statement on a group connection with params
// (all in binary format) and hands each row's values, in binary format, to
// read. The statement is prepared once per connection. A connection that
// failed (a connection error or a timeout) is closed, not reused.
func (d *pgDialect) groupExec(ctx context.Context, params [][]byte, read func([][]byte) error) error {
	return retry(ctx, func() error {
		c, err := d.group.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		err = func() error {
			sd, err := c.Conn().Prepare(ctx, "gojob_durable_group", d.qGroup)
			if err != nil {
				return err
			}
			rr := c.Conn().PgConn().ExecStatement(ctx, sd, params, pgBinary, pgBinary)
			var rerr error
			for rr.NextRow() {
				if rerr == nil {
					rerr = read(rr.Values())
				}
			}
			if _, err := rr.Close(); err != nil {
				return err
			}
			return rerr
		}()
		if err != nil && (d.isConnError(err) || ctx.Err() != nil) {
			c.Conn().Close(context.Background())
		}
		return err
	})
}

// pgBinary is the format codes of the group statement's parameters and
// results: all binary.
var pgBinary = []int16{1}

// The group statement's parameters and answer in PostgreSQL's binary
// format, written and read here rather than through pgx's type map: the
// statement's types never change (text[] and timestamptz[] in, int4, text,
// timestamptz and int8 out), and pgx's generic path (an encode plan per array,
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

// pgTextArrayNull appends a text[] of the n strings str(i), NULL where
// str returns false.
func pgTextArrayNull(buf []byte, n int, str func(i int) (string, bool)) []byte {
	return pgArrayNull(buf, n, pgOIDText, str, func(buf []byte, s string) []byte {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		return append(buf, s...)
	})
}

// pgTimeArray appends a timestamptz[] of the n times at(i), NULL where at
// returns false.
func pgTimeArray(buf []byte, n int, at func(i int) (time.Time, bool)) []byte {
	return pgArrayNull(buf, n, pgOIDTimestamptz, at, func(buf []byte, t time.Time) []byte {
		buf = binary.BigEndian.AppendUint32(buf, 8)
		return binary.BigEndian.AppendUint64(buf, uint64(t.UnixMicro()-pgEpochMicros))
	})
}

// pgArrayNull appends a one-dimensional array of element type oid: the n
// values get(i), each appended by enc with its length, NULL where get
// returns false.
func pgArrayNull[T any](buf []byte, n int, oid uint32, get func(i int) (T, bool), enc func([]byte, T) []byte) []byte {
	hasNull := false
	for i := range n {
		if _, ok := get(i); !ok {
			hasNull = true
			break
		}
	}
	buf = pgArrayHeader(buf, n, oid, hasNull)
	for i := range n {
		v, ok := get(i)
		if !ok {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF) // -1: NULL
			continue
		}
		buf = enc(buf, v)
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

// pgDecodeInt8 reads a binary int8.
func pgDecodeInt8(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("durable: int8 of %d bytes", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
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
