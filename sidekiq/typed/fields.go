package typed

import (
	"reflect"
	"strings"
	"sync"
	"unicode"
)

// Positional, embedded in a struct, makes the struct's exported fields the
// job's positional arguments, in order.
type Positional struct{}

var positionalType = reflect.TypeFor[Positional]()

// field is one bound field of a struct.
type field struct {
	name      string // Go field name
	key       string // hash key
	index     []int  // reflect.Value.FieldByIndex
	depth     int    // embedding depth
	optional  bool
	omitEmpty bool
}

type structInfo struct {
	positional bool
	fields     []field
	byKey      map[string]int // key -> position in fields
}

var structCache sync.Map // reflect.Type -> *structInfo

func infoOf(t reflect.Type) *structInfo {
	if v, ok := structCache.Load(t); ok {
		return v.(*structInfo)
	}
	si := &structInfo{byKey: map[string]int{}}
	var all []field
	collect(t, nil, 0, si, &all)
	// As encoding/json: a key bound at a shallower depth hides the same
	// key in an embedded struct; at the same depth the first wins.
	win := map[string]int{} // key -> position in all
	for i, f := range all {
		if w, dup := win[f.key]; !dup || f.depth < all[w].depth {
			win[f.key] = i
		}
	}
	for i, f := range all { // in field order
		if win[f.key] == i {
			si.byKey[f.key] = len(si.fields)
			si.fields = append(si.fields, f)
		}
	}
	v, _ := structCache.LoadOrStore(t, si)
	return v.(*structInfo)
}

// collect appends the fields of t, in order, those of embedded structs
// (without a name tag) in their place.
func collect(t reflect.Type, index []int, depth int, si *structInfo, out *[]field) {
	for i := range t.NumField() {
		f := t.Field(i)
		idx := append(append([]int(nil), index...), i)
		if f.Anonymous && f.Type == positionalType {
			if depth == 0 {
				si.positional = true
			}
			continue
		}
		key, opts := tagOf(f)
		if key == "-" {
			continue
		}
		if f.Anonymous && key == "" && f.Type.Kind() == reflect.Struct && !special(f.Type) {
			collect(f.Type, idx, depth+1, si, out)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if key == "" {
			key = snake(f.Name)
		}
		*out = append(*out, field{name: f.Name, key: key, index: idx, depth: depth,
			optional: hasOpt(opts, "optional"), omitEmpty: hasOpt(opts, "omitempty")})
	}
}

// special reports whether t has a binding of its own rather than its
// fields'.
func special(t reflect.Type) bool {
	return t == timeType || t == valueType
}

func tagOf(f reflect.StructField) (name, opts string) {
	tag, ok := f.Tag.Lookup("sidekiq")
	if !ok {
		tag = f.Tag.Get("json")
	}
	name, opts, _ = strings.Cut(tag, ",")
	return name, opts
}

// snake turns a Go field name into Ruby's snake_case: UserID is
// "user_id", HTTPServer "http_server".
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			prevLower := i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]))
			nextLower := i > 0 && i+1 < len(r) && unicode.IsUpper(r[i-1]) && unicode.IsLower(r[i+1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// isPositional reports whether t (a struct) embeds Positional.
func isPositional(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && infoOf(t).positional
}

func hasOpt(opts, name string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == name {
			return true
		}
	}
	return false
}
