package wire

// DecodeBacktrace decodes an error_backtrace string, for the fixture tests.
func DecodeBacktrace(s string) ([]string, error) { return decodeBacktrace(s) }
