package contract

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"io"
	"math/bits"
	"strings"

	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// SetErrorBacktrace writes the job's "error_backtrace" in the encoding of
// version v; wire.Job.ErrorBacktrace reads both encodings.
func SetErrorBacktrace(j *wire.Job, lines []string, v wire.Version) {
	j.Set("error_backtrace", rubyjson.StringValue(EncodeBacktrace(lines, v)))
}

// EncodeBacktrace encodes lines as version v writes error_backtrace: JSON
// array → zlib (default level, header 78 9c) → base64, MIME-style with a
// newline after every 60 characters and at the end (≤7.2.0, Ruby's
// Base64.encode64) or strict (7.2.1+).
func EncodeBacktrace(lines []string, v wire.Version) string {
	arr := make([]rubyjson.Value, len(lines))
	for i, l := range lines {
		arr[i] = rubyjson.StringValue(l)
	}
	enc := base64.StdEncoding.EncodeToString(deflateLikeZlib(rubyjson.ArrayValue(arr...).Encode()))
	if StrictBase64Backtrace(v) {
		return enc
	}
	return mimeBase64(enc)
}

// deflateLikeZlib returns the zlib stream of data (default level, header
// 78 9c) framed as Ruby's Zlib::Deflate.deflate frames it: the data blocks,
// the last one marked final, then the Adler-32. Go's compress/flate ends
// every stream with an extra empty stored block (`01 00 00 ff ff`) after a
// non-final data block; the stream then decodes the same but does not look
// like zlib's. The compressed bits themselves differ from zlib's anyway
// (another match finder), so byte identity with Ruby is not the goal, only
// the framing: for a stream of one data block (any backtrace below Go's
// 16,384-token block) the first block is marked final and the empty block
// dropped, and the result is checked by decoding it; otherwise Go's
// stream is returned as it is.
func deflateLikeZlib(data []byte) []byte {
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	zw.Write(data)
	zw.Close()
	out := buf.Bytes()
	if len(out) < 2+5+4 {
		return out
	}
	body := out[2 : len(out)-4] // the deflate stream
	if !bytes.HasSuffix(body, []byte{0, 0, 0xff, 0xff}) {
		return out
	}
	// The empty block's header (BFINAL=1, BTYPE=00) is the highest set
	// bit before its LEN/NLEN; only zero padding follows it.
	end := len(body) - 4
	j := end - 1
	for j >= 0 && body[j] == 0 {
		j--
	}
	if j < 1 {
		return out
	}
	q := bits.Len8(body[j]) - 1
	trimmed := make([]byte, 0, len(out))
	trimmed = append(trimmed, out[:2]...)
	trimmed = append(trimmed, body[:j]...)
	if q > 0 { // byte j also ends the data block: keep its low bits
		trimmed = append(trimmed, body[j]&^(1<<q))
	}
	trimmed[2] |= 1 // BFINAL of the first (and only) data block
	trimmed = append(trimmed, out[len(out)-4:]...)
	zr, err := zlib.NewReader(bytes.NewReader(trimmed))
	if err != nil {
		return out
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, data) {
		return out // more than one data block: keep Go's framing
	}
	return trimmed
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
