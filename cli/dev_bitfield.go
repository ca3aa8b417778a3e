package cli

import (
	"errors"
	"math/big"
	"strconv"
	"strings"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// errBitfieldType is Redis 7's reply to a bad BITFIELD type, word for word
// (t_string.c, getBitfieldTypeFromArgument).
//
//lint:ignore ST1005 the text is Redis's own reply
var errBitfieldType = errors.New("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.")

// registerBitfield teaches gojob dev's embedded server (miniredis, which
// has no BITFIELD) the command as Redis defines it: GET, SET, INCRBY and
// OVERFLOW WRAP|SAT|FAIL on signed (i1-i64) and unsigned (u1-u63) fields
// at bit or #field offsets. Sidekiq 7.x and 8.x keep their execution-time
// histograms with it (Sidekiq 7.3 lib/sidekiq/metrics/shared.rb,
// Histogram#persist and #fetch), so with it gojob dev writes the newest
// format and its dashboard's Metrics pages show the histograms.
//
// The command works on database 0, the one gojob dev prints, and keeps the
// key's expiry.
func registerBitfield(mr *miniredis.Miniredis) error {
	var mu sync.Mutex // BITFIELD reads, changes and writes a key: one at a time
	return mr.Server().Register("BITFIELD", func(c *server.Peer, cmd string, args []string) {
		if len(args) < 1 {
			c.WriteError("ERR wrong number of arguments for 'bitfield' command")
			return
		}
		ops, err := parseBitfieldOps(args[1:])
		if err != nil {
			c.WriteError(err.Error())
			return
		}
		mu.Lock()
		defer mu.Unlock()
		db := mr.DB(0)
		key := args[0]
		cur, err := db.Get(key)
		if err != nil && !errors.Is(err, miniredis.ErrKeyNotFound) {
			c.WriteError(err.Error())
			return
		}
		buf := []byte(cur)
		replies, changed := runBitfield(&buf, ops)
		if changed {
			ttl := db.TTL(key)
			if err := db.Set(key, string(buf)); err != nil {
				c.WriteError(err.Error())
				return
			}
			if ttl > 0 {
				db.SetTTL(key, ttl)
			}
		}
		c.WriteLen(len(replies))
		for _, r := range replies {
			if r == nil {
				c.WriteNull()
			} else {
				c.WriteInt(int(r.Int64()))
			}
		}
	})
}

// bitfieldOp is one GET, SET or INCRBY of a BITFIELD call.
type bitfieldOp struct {
	op       string // GET, SET, INCRBY
	signed   bool
	width    uint
	offset   uint64
	value    *big.Int
	overflow string // WRAP, SAT, FAIL: the OVERFLOW in force
}

var errBitfieldSyntax = errors.New("ERR syntax error")

func parseBitfieldOps(args []string) ([]bitfieldOp, error) {
	var ops []bitfieldOp
	overflow := "WRAP"
	for i := 0; i < len(args); {
		op := strings.ToUpper(args[i])
		if op == "OVERFLOW" {
			if i+1 >= len(args) {
				return nil, errBitfieldSyntax
			}
			overflow = strings.ToUpper(args[i+1])
			if overflow != "WRAP" && overflow != "SAT" && overflow != "FAIL" {
				return nil, errors.New("ERR Invalid OVERFLOW type specified")
			}
			i += 2
			continue
		}
		n := map[string]int{"GET": 3, "SET": 4, "INCRBY": 4}[op]
		if n == 0 || i+n > len(args) {
			return nil, errBitfieldSyntax
		}
		o := bitfieldOp{op: op, overflow: overflow}
		t := args[i+1]
		w, err := strconv.Atoi(t[min(1, len(t)):])
		switch {
		case len(t) < 2 || err != nil:
			return nil, errBitfieldType
		case t[0] == 'i' || t[0] == 'I':
			o.signed = true
			if w < 1 || w > 64 {
				return nil, errBitfieldType
			}
		case t[0] == 'u' || t[0] == 'U':
			if w < 1 || w > 63 {
				return nil, errBitfieldType
			}
		default:
			return nil, errBitfieldType
		}
		o.width = uint(w)
		off := args[i+2]
		mult := uint64(1)
		if strings.HasPrefix(off, "#") {
			off, mult = off[1:], uint64(w)
		}
		pos, err := strconv.ParseUint(off, 10, 64)
		if err != nil {
			return nil, errors.New("ERR bit offset is not an integer or out of range")
		}
		o.offset = pos * mult
		if n == 4 {
			v, err := strconv.ParseInt(args[i+3], 10, 64)
			if err != nil {
				return nil, errors.New("ERR value is not an integer or out of range")
			}
			o.value = big.NewInt(v)
		}
		ops = append(ops, o)
		i += n
	}
	return ops, nil
}

// runBitfield applies ops to buf, growing it as writes need, and returns
// one reply per op (nil: an INCRBY or SET that OVERFLOW FAIL refused) and
// whether buf changed.
func runBitfield(buf *[]byte, ops []bitfieldOp) ([]*big.Int, bool) {
	replies := make([]*big.Int, 0, len(ops))
	changed := false
	for _, o := range ops {
		old := o.get(*buf)
		switch o.op {
		case "GET":
			replies = append(replies, old)
		case "SET", "INCRBY":
			v := new(big.Int).Set(o.value)
			if o.op == "INCRBY" {
				v.Add(v, old)
			}
			v, ok := o.fit(v)
			if !ok {
				replies = append(replies, nil)
				continue
			}
			o.set(buf, v)
			changed = true
			if o.op == "SET" {
				replies = append(replies, old)
			} else {
				replies = append(replies, v)
			}
		}
	}
	return replies, changed
}

// bounds are the smallest and largest values of the field.
func (o bitfieldOp) bounds() (*big.Int, *big.Int) {
	if o.signed {
		hi := new(big.Int).Lsh(big.NewInt(1), o.width-1)
		lo := new(big.Int).Neg(hi)
		return lo, hi.Sub(hi, big.NewInt(1))
	}
	hi := new(big.Int).Lsh(big.NewInt(1), o.width)
	return big.NewInt(0), hi.Sub(hi, big.NewInt(1))
}

// fit applies the OVERFLOW in force to v, for INCRBY and SET alike (as
// Redis's bitfieldGeneric); ok is false when FAIL refuses.
func (o bitfieldOp) fit(v *big.Int) (*big.Int, bool) {
	lo, hi := o.bounds()
	if v.Cmp(lo) >= 0 && v.Cmp(hi) <= 0 {
		return v, true
	}
	switch o.overflow {
	case "SAT":
		if v.Cmp(lo) < 0 {
			return lo, true
		}
		return hi, true
	case "FAIL":
		return nil, false
	}
	mod := new(big.Int).Lsh(big.NewInt(1), o.width)
	w := new(big.Int).Mod(v, mod) // 0 <= w < mod
	if o.signed && w.Cmp(hi) > 0 {
		w.Sub(w, mod)
	}
	return w, true
}

// get reads the field (bit 0 is the most significant bit of byte 0; bits
// past the end read as 0).
func (o bitfieldOp) get(buf []byte) *big.Int {
	var u uint64
	for i := range uint64(o.width) {
		u <<= 1
		bit := o.offset + i
		if byteAt := bit / 8; byteAt < uint64(len(buf)) && buf[byteAt]&(0x80>>(bit%8)) != 0 {
			u |= 1
		}
	}
	v := new(big.Int).SetUint64(u)
	if o.signed && o.width > 0 && u&(1<<(o.width-1)) != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), o.width))
	}
	return v
}

// set writes v (within the field's bounds) into the field.
func (o bitfieldOp) set(buf *[]byte, v *big.Int) {
	mod := new(big.Int).Lsh(big.NewInt(1), o.width)
	u := new(big.Int).Mod(v, mod).Uint64()
	if need := (o.offset + uint64(o.width) + 7) / 8; uint64(len(*buf)) < need {
		*buf = append(*buf, make([]byte, need-uint64(len(*buf)))...)
	}
	b := *buf
	for i := range uint64(o.width) {
		bit := o.offset + i
		mask := byte(0x80 >> (bit % 8))
		if u&(1<<(uint64(o.width)-1-i)) != 0 {
			b[bit/8] |= mask
		} else {
			b[bit/8] &^= mask
		}
	}
}
