// Package rubyjson reads and writes JSON exactly as Ruby's json library
// (json 2.x, the JSON.parse and JSON.generate that Sidekiq.load_json and
// Sidekiq.dump_json call) does, so that a payload gojob writes is the same
// sequence of bytes Ruby would have written for the same job.
//
// Go's encoding/json cannot be used for that: it loses key order (Ruby
// hashes keep insertion order, and the Web UI shows jobs as stored), folds
// integers and floats into float64 (Ruby tells 1 from 1.0 by the literal,
// and Sidekiq 8 relies on it to tell millisecond from second timestamps),
// escapes <, > and & and the line separators U+2028/U+2029 (Ruby writes
// them raw), and formats floats differently from Ruby's Float#to_s
// (1.0e+16, 1.5e-07, 100.0). Those differences matter because Sidekiq
// matches jobs by their exact bytes: the Web UI's delete, ZREM and LREM of
// a retried or requeued job, and the per-job keys of some plugins.
//
// What it provides:
//
//   - Value and Map: a decoded document with object keys in order (a
//     repeated key keeps its first position and its last value, as Ruby's
//     Hash does) and numbers kept by lexical type, Integer of any size and
//     Float with its original text when that text is already canonical.
//   - Parse and ParseObject: Ruby's JSON.parse (NaN and Infinity are
//     rejected, as Ruby does by default); big integers stay exact.
//   - Value.Encode / Map.Encode: Ruby's JSON.generate, byte for byte, with
//     FormatFloat as Ruby's Float#to_s (fixed notation from 1e-4 up to 1e15,
//     and between 1e15 and 1e16 only for numbers with a fraction).
//
// The rules, with the Ruby source they come from, are in
// docs/sidekiq-wire.md#json-generation; compat_test/payload_compat_test.go
// compares this package with Ruby on thousands of random floats, strings and
// documents.
package rubyjson
