package rubyjson_test

import (
	"fmt"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// A document keeps its key order and the lexical type of its numbers, and
// re-encodes to Ruby's bytes: 1.0 stays a Float, 1e20 is written as Ruby's
// Float#to_s writes it, and "<" is not escaped.
func ExampleParseObject() {
	m, err := rubyjson.ParseObject([]byte(`{"b":1,"a":1.0,"big":1e20,"html":"<p>"}`))
	if err != nil {
		panic(err)
	}
	a, _ := m.Get("a")
	fmt.Println(m.Keys(), a.Kind())
	fmt.Println(string(m.Encode()))
	// Output:
	// [b a big html] float
	// {"b":1,"a":1.0,"big":1.0e+20,"html":"<p>"}
}

// FromGo converts Go values; map keys are sorted, since Go maps have no
// order (build a Map to choose the order).
func ExampleFromGo() {
	v, err := rubyjson.FromGo([]any{1, 2.5, 100.0, "two", map[string]any{"z": true, "a": nil}})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(v.Encode()))
	// Output:
	// [1,2.5,100.0,"two",{"a":null,"z":true}]
}

// A Map keeps insertion order, as a Ruby Hash does.
func ExampleMap() {
	m := rubyjson.NewMap()
	m.Set("class", rubyjson.StringValue("HardJob"))
	m.Set("args", rubyjson.ArrayValue(rubyjson.IntValue(1), rubyjson.FloatValue(0.1)))
	m.Set("class", rubyjson.StringValue("EasyJob")) // keeps its position
	fmt.Println(string(m.Encode()))
	// Output:
	// {"class":"EasyJob","args":[1,0.1]}
}
