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
	v, ok := j.m.Get("error_backtrace")
	if !ok || v.IsNull() {
		return nil, nil
	}
	if a, ok := v.Array(); ok {
		return stringsOf(a), nil
	}
	s, ok := v.Str()
	if !ok {
		return nil, fmt.Errorf("sidekiq: error_backtrace is a %s", v.Kind())
	}
	return DecodeBacktrace(s)
}

// SetErrorBacktrace writes "error_backtrace" in the encoding of version v.
func (j *Job) SetErrorBacktrace(lines []string, v Version) {
	j.Set("error_backtrace", rubyjson.StringValue(EncodeBacktrace(lines, v)))
}

// DecodeBacktrace decodes an error_backtrace string (either base64 form).
func DecodeBacktrace(s string) ([]string, error) {
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

// EncodeBacktrace encodes lines as version v writes error_backtrace: JSON
// array → zlib (default level, header 78 9c) → base64, MIME-style with a
// newline after every 60 characters and at the end (≤7.2.0, Ruby's
// Base64.encode64) or strict (7.2.1+).
func EncodeBacktrace(lines []string, v Version) string {
	arr := make([]rubyjson.Value, len(lines))
	for i, l := range lines {
		arr[i] = rubyjson.StringValue(l)
	}
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	zw.Write(rubyjson.ArrayValue(arr...).Encode())
	zw.Close()
	enc := base64.StdEncoding.EncodeToString(buf.Bytes())
	if v.StrictBase64Backtrace() {
		return enc
	}
	return mimeBase64(enc)
}

// mimeBase64 formats an encoded string as Ruby's Base64.encode64 does.
func mimeBase64(enc string) string {
	var b strings.Builder
	for len(enc) > 60 {
		b.WriteString(enc[:60])
		b.WriteByte('\n')
		enc = enc[60:]
	}
	b.WriteString(enc)
	b.WriteByte('\n')
	return b.String()
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
