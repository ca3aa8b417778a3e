package rubyjson

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormatFloat(t *testing.T) {
	t.Parallel()
	cases := []struct {
		f    float64
		want string
	}{
		{1, "1.0"}, {3.5, "3.5"}, {0, "0.0"}, {-0.5, "-0.5"},
		{1795296573.1664987, "1795296573.1664987"},
		{1e15, "1.0e+15"}, {999999999999999, "999999999999999.0"}, {1e16, "1.0e+16"}, {1.5e-7, "1.5e-07"},
		{0.0001, "0.0001"}, {0.00001, "1.0e-05"}, {123456789012345678, "1.2345678901234568e+17"},
		{1e100, "1.0e+100"}, {-2.5e-300, "-2.5e-300"}, {0.1, "0.1"}, {100, "100.0"},
		{9007199254740993, "9.007199254740992e+15"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, formatFloat(c.f), "%v", c.f)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	in := `{"retry":true,"queue":"default","args":[1,"two",{"three":3.5},null,false,-0.0,12345678901234567890123,"é /<>&","a\"b\\c\n\u0001"],"class":"HardJob","jid":"2192851646718f18b780163c","created_at":1795296573.1651707,"enqueued_at":1795296573.165405}`
	v, err := Parse([]byte(in))
	require.NoError(t, err)
	require.Equal(t, in, string(v.Encode()))
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		` { "a" : 1E3 , "b":[ ] ,"c":{}}`: `{"a":1000.0,"b":[],"c":{}}`,
		`{"a":1,"b":2,"a":3}`:             `{"a":3,"b":2}`,
		`"\u00e9\/\ud83d\ude00"`:          `"é/😀"`,
		`-0`:                              `0`,
		`1e400`:                           `1e400`,
		`1.7468303847678468e+9`:           `1746830384.7678468`,
		`1e+11`:                           `100000000000.0`,
	}
	for in, want := range cases {
		v, err := Parse([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, string(v.Encode()), in)
	}
	for _, bad := range []string{``, `{`, `[1,]`, `01`, `1.`, `-`, `"a`, "\"\x01\"", `{"a" 1}`, `nul`, `{} x`} {
		_, err := Parse([]byte(bad))
		require.Error(t, err, bad)
	}
}

// A float text that is already in Float#to_s form is kept as it is without
// converting it; the check must agree with converting, for every text.
func TestFloatTextsInRubyFormSkipTheConversion(t *testing.T) {
	t.Parallel()
	check := func(text string) {
		t.Helper()
		want := text
		if f, err := strconv.ParseFloat(text, 64); err == nil {
			want = formatFloat(f)
		}
		if inRubyForm(text) {
			require.Equal(t, want, text, "inRubyForm(%q) but Ruby writes %q", text, want)
		}
		v, err := Parse([]byte(text))
		require.NoError(t, err, text)
		require.Equal(t, want, string(v.Encode()), text)
	}
	for _, s := range []string{"0.0", "1.0", "-1.0", "0.1", "0.0001", "0.00001", "2.5", "2.50", "100.0", "9000.0",
		"123456789012345.0", "1234567890123456.0", "999999999999999.9", "0.30000000000000004", "1795296573.165405",
		"1795296573.1651707", "-0.0", "-0.5", "10.01", "1.7976931348623157", "100000000000000000.0", "0.1000"} {
		check(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var f float64
		switch r.IntN(3) {
		case 0:
			f = r.Float64() * math.Pow(10, float64(r.IntN(20)-6))
		case 1:
			f = math.Round(r.Float64()*1e6) / math.Pow(10, float64(r.IntN(8)))
		default:
			f = float64(r.Int64N(1<<53)) / math.Pow(10, float64(r.IntN(17)))
		}
		check(strconv.FormatFloat(f, 'f', -1, 64) + map[bool]string{true: ".0", false: ""}[f == math.Trunc(f)])
		check(strconv.FormatFloat(f, 'f', r.IntN(17)+1, 64))
	}
}

func TestMapOrder(t *testing.T) {
	t.Parallel()
	m := NewMap()
	m.Set("b", IntValue(1))
	m.Set("a", IntValue(2))
	m.Set("b", IntValue(3))
	require.Equal(t, `{"b":3,"a":2}`, string(m.Encode()))
	m.Delete("b")
	m.Set("b", IntValue(4))
	require.Equal(t, `{"a":2,"b":4}`, string(m.Encode()))
	for i := 0; i < 40; i++ {
		m.Set(string(rune('a'+i%26))+string(rune('0'+i/26)), IntValue(int64(i)))
	}
	v, ok := m.Get("c1")
	require.True(t, ok)
	i, _ := v.Int()
	require.EqualValues(t, 28, i)
}

// The decoder builds objects and arrays on a shared scratch stack: nested
// values, repeated keys before and after an object grows past the linear
// search, escaped known keys and a failed parse must not mix members up.
func TestParseNestingAndRepeatedKeys(t *testing.T) {
	t.Parallel()
	var big strings.Builder
	var want strings.Builder
	big.WriteString(`{"k0":0,"k1":[1,[2,{"x":[3]}],{}],`)
	want.WriteString(`{"k0":"last0","k1":[1,[2,{"x":[3]}],{}],`)
	for i := 2; i < 30; i++ {
		fmt.Fprintf(&big, `"k%d":{"a":%d,"b":[%d,{"a":1,"a":2}]},`, i, i, i)
		fmt.Fprintf(&want, `"k%d":{"a":%d,"b":[%d,{"a":2}]},`, i, i, i)
	}
	big.WriteString(`"k0":"last0","k5":"last5","cl\u0061ss":"X","class":"Y"}`)
	got, err := Parse([]byte(big.String()))
	require.NoError(t, err)
	exp := strings.Replace(want.String(), `"k5":{"a":5,"b":[5,{"a":2}]}`, `"k5":"last5"`, 1) + `"class":"Y"}`
	require.Equal(t, exp, string(got.Encode()))

	for _, in := range []string{`{"a":[1,2,{"b":[3`, `[[1,2],[3,{"c":`, `{"class":"A","args":[1,2,}`} {
		_, err := Parse([]byte(in))
		require.Error(t, err, in)
	}
	v, err := Parse([]byte(`[[1,2],{"class":"A","args":[3]},[]]`))
	require.NoError(t, err)
	require.Equal(t, `[[1,2],{"class":"A","args":[3]},[]]`, string(v.Encode()))
}

// A decoded float whose text is not in Float#to_s form is put in that form
// when it is written or read, never left as the sender wrote it: its text,
// its encoding and its comparison with the same float built in Go agree.
func TestDecodedFloatReadsAndComparesInRubyForm(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`1.7468303847678468e+9`: `1746830384.7678468`,
		`2.50`:                  `2.5`,
		`1E3`:                   `1000.0`,
		`1e400`:                 `1e400`,
		`1764000000.1234567`:    `1764000000.1234567`,
	} {
		v, err := Parse([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, string(v.Encode()), in)
		require.Equal(t, want, string(v.Encode()), in)
		if f, ok := v.Float(); ok && in != `1e400` {
			require.True(t, Equal(v, FloatValue(f)), in)
			require.True(t, Equal(FloatValue(f), v), in)
		}
		w, err := Parse([]byte(want))
		require.NoError(t, err, want)
		require.True(t, Equal(v, w), in)
	}
}

// An array is no object and an object no array, whatever either holds
// inside.
func TestArrayAndObjectAccessorsKeepTheirKinds(t *testing.T) {
	t.Parallel()
	v, err := Parse([]byte(`[1,{"a":[2]}]`))
	require.NoError(t, err)
	m, ok := v.Map()
	require.False(t, ok)
	require.Nil(t, m)
	elems, ok := v.Array()
	require.True(t, ok)
	require.Len(t, elems, 2)
	inner, ok := elems[1].Map()
	require.True(t, ok)
	a, _ := inner.Get("a")
	_, ok = a.Map()
	require.False(t, ok)
	got, ok := a.Array()
	require.True(t, ok)
	require.Equal(t, `[2]`, string(ArrayValue(got...).Encode()))
	c := v.Clone()
	require.True(t, Equal(v, c))
	ce, _ := c.Array()
	ce[0] = StringValue("x")
	require.Equal(t, `[1,{"a":[2]}]`, string(v.Encode()), "a clone shares no elements")
	_, ok = ArrayValue().Array()
	require.True(t, ok)
	require.Equal(t, `[]`, string(ArrayValue().Encode()))
}

// Decoded objects and arrays of every size grow and shrink on their own:
// a small one shares an allocation with its members, and a key set on it
// or an element appended to its slice never writes over a neighbour.
func TestDecodedObjectsAndArraysGrowWithoutTouchingTheirNeighbours(t *testing.T) {
	for n := 0; n <= 20; n++ {
		var obj, arr []string
		for i := range n {
			obj = append(obj, fmt.Sprintf(`"k%d":%d`, i, i))
			arr = append(arr, strconv.Itoa(i))
		}
		doc := fmt.Sprintf(`{"o":{%s},"a":[%s],"after":"x"}`, strings.Join(obj, ","), strings.Join(arr, ","))
		m, err := ParseObject([]byte(doc))
		require.NoError(t, err, doc)

		o, _ := m.Get("o")
		om, ok := o.Map()
		require.True(t, ok)
		om.Set("new", StringValue("n"))
		if n > 0 {
			require.True(t, om.Delete("k0"))
		}
		a, _ := m.Get("a")
		elems, ok := a.Array()
		require.True(t, ok)
		grown := append(elems, StringValue("appended"))
		other := append(elems, StringValue("other"))
		g, _ := grown[n].Str()
		require.Equal(t, "appended", g, "size %d: two appends to one decoded array do not share a slot", n)
		o2, _ := other[n].Str()
		require.Equal(t, "other", o2)

		wantObj := append(obj[min(n, 1):], `"new":"n"`)
		want := fmt.Sprintf(`{"o":{%s},"a":[%s],"after":"x"}`, strings.Join(wantObj, ","), strings.Join(arr, ","))
		require.Equal(t, want, string(m.Encode()), "size %d", n)
	}
}
