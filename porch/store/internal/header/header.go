// Package header encodes the response headers an idempotency record keeps
// (driver.Response.Header) for the column both SQL drivers store them in.
//
// The encoding is the header block of HTTP/1.1 without the blank line: one
// "Name: value\n" line per value, names in sorted order. It is bytes, not
// text, because a header value may hold bytes 0x80–0xFF that a PostgreSQL
// text column in UTF-8 would refuse (and JSON would replace with U+FFFD), and
// readable, so that an operator can look at a row.
package header

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
)

// newlines are what net/http itself turns into spaces when it writes a
// header value: a value stored with them replays as the client would have
// received it.
var newlines = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")

// Encode returns h as lines; nil or empty h is an empty slice, the column's
// default, which is what rows stored before the column existed hold.
// Names are expected to be valid field names (no ':' and no newline), as
// idem.New checks them.
func Encode(h http.Header) []byte {
	if len(h) == 0 {
		return []byte{}
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, name := range names {
		for _, v := range h[name] {
			b.WriteString(name)
			b.WriteString(": ")
			b.WriteString(newlines.Replace(v))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// Decode is Encode's inverse. It returns nil for an empty encoding, and
// skips a line without a colon rather than failing the load: a stored
// response that cannot be replayed whole is still better replayed without
// one header than refused.
func Decode(b []byte) http.Header {
	if len(b) == 0 {
		return nil
	}
	h := make(http.Header)
	for line := range bytes.Lines(b) {
		name, value, ok := strings.Cut(strings.TrimSuffix(string(line), "\n"), ": ")
		if !ok {
			continue
		}
		h[name] = append(h[name], value)
	}
	return h
}
