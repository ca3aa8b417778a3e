package wire

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"io"
	"strings"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// ErrorBacktrace decodes "error_backtrace": base64 (MIME with line breaks,
// as ≤7.2.0 writes, or strict, as 7.2.1+ writes) of a zlib stream of a JSON
// array of strings. A raw JSON array (very old payloads) is accepted too. It
// returns nil, nil when the field is absent.
func (j *Job) ErrorBacktrace() ([]string, error) {
	v, ok := j.Get("error_backtrace")
	if !ok || v.Kind() == rubyjson.Null {
		return nil, nil
	}
	if a, ok := v.Array(); ok {
		return stringsOf(a), nil
	}
	s, ok := v.Str()
	if !ok {
		return nil, fmt.Errorf("sidekiq: error_backtrace is a %s", v.Kind())
	}
	return decodeBacktrace(s)
}

// decodeBacktrace decodes an error_backtrace string (either base64 form).
func decodeBacktrace(s string) ([]string, error) {
	clean := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' {
			return -1
		}
		return r
	}, s)
	raw, err := base64.StdEncoding.DecodeString(clean)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(clean, "=")); err != nil {
			return nil, fmt.Errorf("sidekiq: error_backtrace base64: %w", err)
		}
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("sidekiq: error_backtrace zlib: %w", err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: error_backtrace zlib: %w", err)
	}
	v, err := rubyjson.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: error_backtrace json: %w", err)
	}
	a, ok := v.Array()
	if !ok {
		return nil, fmt.Errorf("sidekiq: error_backtrace is not an array")
	}
	return stringsOf(a), nil
}

func stringsOf(a []rubyjson.Value) []string {
	out := make([]string, 0, len(a))
	for _, e := range a {
		if s, ok := e.Str(); ok {
			out = append(out, s)
		} else {
			out = append(out, string(e.Encode()))
		}
	}
	return out
}
