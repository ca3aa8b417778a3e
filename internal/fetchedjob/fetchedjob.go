// Package fetchedjob decodes the payloads the runtime fetches: bytes it
// owns and never modifies again, kept for the job's acknowledgement. The
// job's strings share those bytes instead of a copy, and its fields are
// decoded only when they are read (a job that runs and succeeds is read a
// few times and never re-encoded). The payload is checked as
// wire.ParseJob checks it.
//
// Package wire installs the decoder (it needs the Job's unexported fields);
// this package cannot import wire, which imports it.
package fetchedjob

// parseInto is the installed decoder, a func(*J, []byte) error.
var parseInto any

// Install makes parse the decoder of ParseInto and Parse. Package wire
// calls it from its init.
func Install[J any](parse func(*J, []byte) error) { parseInto = parse }

// ParseInto decodes data into j, which it resets: a job inside a larger
// struct costs no allocation of its own. On error j is left empty.
func ParseInto[J any](j *J, data []byte) error {
	return parseInto.(func(*J, []byte) error)(j, data)
}

// Parse decodes data into a new job.
func Parse[J any](data []byte) (*J, error) {
	j := new(J)
	if err := ParseInto(j, data); err != nil {
		return nil, err
	}
	return j, nil
}
