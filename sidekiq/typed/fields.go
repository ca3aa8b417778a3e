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
	index     int
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
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type == positionalType && f.Anonymous {
			si.positional = true
			continue
		}
		if !f.IsExported() {
			continue
		}
		key, opts := tagOf(f)
		if key == "-" {
			continue
		}
		if key == "" {
			key = snake(f.Name)
		}
		si.byKey[key] = len(si.fields)
		si.fields = append(si.fields, field{name: f.Name, key: key, index: i, optional: hasOpt(opts, "optional"), omitEmpty: hasOpt(opts, "omitempty")})
	}
	v, _ := structCache.LoadOrStore(t, si)
	return v.(*structInfo)
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
