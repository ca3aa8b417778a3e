package resp

import "strconv"

// AppendCmd appends the command args to buf, encoded in RESP (an array of
// bulk strings), for WriteRaw.
func AppendCmd(buf []byte, args ...string) []byte {
	buf = appendHeader(buf, '*', len(args))
	for _, a := range args {
		buf = appendHeader(buf, '$', len(a))
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}

// AppendLREM appends `LREM list -1 raw`.
func AppendLREM(buf []byte, list string, raw []byte) []byte {
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

// KeepBuf returns buf emptied for the next round, or nil when it grew
// past what is worth keeping (a round of large payloads by value).
func KeepBuf(buf []byte) []byte {
	if cap(buf) > 64<<10 {
		return nil
	}
	return buf[:0]
}
