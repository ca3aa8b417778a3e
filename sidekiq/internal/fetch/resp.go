package fetch

import "strconv"

// The rounds' commands, encoded here in RESP (the Redis protocol) and
// written with redisx.RawWriter when the connection takes it: a move's
// and a positional acknowledgement's commands never change for a list, so
// each list keeps them encoded (slotList), and a round is a few appends.
// Through redigo's Send every argument of every command was converted and
// written again, about a tenth of gojob's CPU on the bench.

// appendCmd appends the command args to buf.
func appendCmd(buf []byte, args ...string) []byte {
	buf = appendHeader(buf, '*', len(args))
	for _, a := range args {
		buf = appendHeader(buf, '$', len(a))
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}

// appendLREM appends `LREM list -1 raw`.
func appendLREM(buf []byte, list string, raw []byte) []byte {
	buf = append(buf, "*4\r\n$4\r\nLREM\r\n"...)
	buf = appendHeader(buf, '$', len(list))
	buf = append(buf, list...)
	buf = append(buf, "\r\n$2\r\n-1\r\n"...)
	buf = appendHeader(buf, '$', len(raw))
	buf = append(buf, raw...)
	return append(buf, '\r', '\n')
}

func appendHeader(buf []byte, kind byte, n int) []byte {
	buf = append(buf, kind)
	buf = strconv.AppendInt(buf, int64(n), 10)
	return append(buf, '\r', '\n')
}

// appendTo appends the acknowledgement's command (see send).
func (a *ack) appendTo(buf []byte) []byte {
	if a.byPos && a.trimCmd != nil {
		return append(buf, a.trimCmd...)
	}
	if a.byPos {
		return appendCmd(buf, "LTRIM", a.list, "0", "-2")
	}
	return appendLREM(buf, a.list, a.raw)
}
