package rubyjson

import (
	"errors"
	"strconv"
)

var errNumber = errors.New("invalid number")

// parseNumberIn reads a JSON number at data[pos:] and returns it normalized
// as Ruby's parse and generate would write it, and the position after it.
// When src (data's text) is not empty, its slices become the number's
// text.
func parseNumberIn(data []byte, src string, pos int) (Value, int, error) {
	end, isFloat, ok := scanNumber(data, pos)
	if !ok {
		return Value{}, end, &SyntaxError{Offset: pos, Msg: errNumber.Error()}
	}
	var text string
	if src != "" {
		text = src[pos:end]
	} else {
		text = string(data[pos:end])
	}
	if !isFloat {
		if text == "-0" {
			text = "0"
		}
		return Value{kind: Integer, s: text}, end, nil
	}
	// A text not in Float#to_s form is shaped when it is written or read
	// (Value.floatText), not here.
	return Value{kind: Float, s: text, unshaped: !inRubyForm(text)}, end, nil
}

// scanNumber checks the JSON number at data[pos:] and returns the position
// after it and whether it is a float (a fraction or an exponent). When it
// is not a number, ok is false and end is where the scan stopped. A
// leading zero ends the integer part, so "01" is the number 0 followed by
// data the caller rejects, as Ruby's parser does.
func scanNumber(data []byte, pos int) (end int, isFloat, ok bool) {
	if pos < len(data) && data[pos] == '-' {
		pos++
	}
	if pos >= len(data) {
		return pos, false, false
	}
	switch {
	case data[pos] == '0':
		pos++
	case data[pos] >= '1' && data[pos] <= '9':
		pos = digitsEnd(data, pos)
	default:
		return pos, false, false
	}
	if pos < len(data) && data[pos] == '.' {
		d := pos + 1
		if pos = digitsEnd(data, d); pos == d {
			return pos, false, false
		}
		isFloat = true
	}
	if pos < len(data) && (data[pos] == 'e' || data[pos] == 'E') {
		pos++
		if pos < len(data) && (data[pos] == '+' || data[pos] == '-') {
			pos++
		}
		d := pos
		if pos = digitsEnd(data, d); pos == d {
			return pos, false, false
		}
		isFloat = true
	}
	return pos, isFloat, true
}

// digitsEnd returns the end of the run of ASCII digits at data[pos:].
func digitsEnd(data []byte, pos int) int {
	for pos < len(data) && data[pos] >= '0' && data[pos] <= '9' {
		pos++
	}
	return pos
}

// shapeFloat returns the Float#to_s form of a valid JSON float's text.
func shapeFloat(text string) string {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		// Out of float64 range: Ruby would parse an infinity and refuse to
		// write it. Keep the text so nothing is lost.
		return text
	}
	var buf [32]byte
	if out := appendFloat(buf[:0], f); string(out) != text {
		return string(out)
	}
	return text
}

// inRubyForm reports, without converting, whether the text of a valid JSON
// float is already what Float#to_s writes for its value: fixed notation
// (no exponent), a magnitude where Ruby writes fixed notation for such
// texts (1e-4 up to 1e15: FormatFloat), no trailing zero in the fraction but for "X.0", and at most 15
// significant digits. Such a text is the shortest that reads back as its
// double: two decimals of 15 digits or fewer never read as the same double
// (DBL_DIG), so no shorter one does. Longer texts go through
// ParseFloat/appendFloat.
func inRubyForm(text string) bool {
	if text == "" || text[0] == '-' {
		if len(text) < 2 || text[1] == '0' { // -0.x: the slow path
			return false
		}
		text = text[1:]
	}
	dot := -1
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '.':
			dot = i
		case c < '0' || c > '9':
			return false // an exponent
		}
	}
	if dot <= 0 || dot == len(text)-1 {
		return false
	}
	intPart, frac := text[:dot], text[dot+1:]
	if frac != "0" && frac[len(frac)-1] == '0' {
		return false
	}
	var sig int
	if intPart == "0" {
		if frac == "0" {
			return true // 0.0
		}
		lead := 0
		for lead < len(frac) && frac[lead] == '0' {
			lead++
		}
		if lead > 3 { // under 1e-4: Ruby writes 1.0e-05
			return false
		}
		sig = len(frac) - lead
	} else {
		sig = len(intPart)
		if frac != "0" {
			sig += len(frac)
		} else {
			// "X.0": trailing zeros of the integer part are not significant.
			for i := len(intPart) - 1; i > 0 && intPart[i] == '0'; i-- {
				sig--
			}
		}
	}
	return sig <= 15 && len(intPart) <= 15 // 1e15 and up: 1.0e+15
}
