// Package typed registers Sidekiq handlers whose arguments decode into Go
// types, and pushes jobs from Go values: the Go form of a Ruby worker's
// perform(*args) and of Class.perform_async(*args).
//
// A job's arguments bind to a type parameter T in one of two ways:
//
//   - A struct that embeds Positional takes the job's positional
//     arguments: its exported fields, in order, are args[0], args[1], ...
//     (perform(user_id, template)).
//   - Any other type takes the job's single argument, args[0]: a struct
//     binds to a hash with string keys (perform(params) called with
//     perform_async("user_id" => 1)), a string to a string, and so on.
//
// A field's key is its `sidekiq` tag, else its `json` tag, else its name
// in snake_case (UserID is "user_id"); "-" skips a field. The fields of
// an embedded struct bind in its place, as encoding/json has it (an outer
// field hides an embedded one of the same key). The tag option
// ",optional" lets a trailing positional argument be missing (a Ruby
// default argument), and is not written when it holds its zero value; a
// missing hash key always leaves the zero value.
//
// Decoding follows Ruby's JSON: an integer field takes only a JSON
// integer (1.0 is a Float in Ruby and an error here), a float field takes
// both, a string takes strings (Ruby's JSON writes a Symbol as its name),
// time.Time takes epoch seconds or an ISO 8601 string, time.Duration takes
// seconds, any takes what rubyjson.Value.Interface returns, and
// rubyjson.Value takes the raw value. When the job is an ActiveJob wrapper
// (its class is registered under the ActiveJob class, as Server.Handle
// does), the arguments are first deserialized as ActiveJob reads them
// (package activejob): a Symbol, a GlobalID or a Module is a string, a
// Time, DateTime, TimeWithZone or Date a time.Time, a Duration a
// time.Duration, a BigDecimal a float or a string, and a hash, whatever
// its key kind, binds as a hash.
//
// A payload that does not decode fails the job with an *ArgError naming
// the argument (args[1], args[0]["user_id"]) and the Go type: the job
// retries and dies as any failing job does, its payload unchanged.
//
// Push and NewJob encode T the other way, to the bytes Ruby's
// perform_async writes for the same values (sidekiq/rubyjson): a struct's
// keys in field order, floats in Ruby's format, time.Time as epoch seconds
// (Ruby's Time#to_f).
package typed
