package rubyjson

import "fmt"

// SyntaxError describes where JSON text is malformed.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("rubyjson: %s at offset %d", e.Msg, e.Offset)
}
