package canonjson

import (
	"bytes"
	"cmp"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds what the form needs of JSON strings: where one ends,
// what its escapes stand for, its canonical spelling and size, and the
// order of member names by their decoded bytes.

// stringEnd returns the end of the string whose opening quote is at b[i],
// closing quote included.
func stringEnd(b []byte, i int) int {
	i++
	q := -1 // the next quote at i or after, escaped or not
	for {
		if q < i {
			q = i + bytes.IndexByte(b[i:], '"')
		}
		k := bytes.IndexByte(b[i:q], '\\')
		if k < 0 {
			return q + 1
		}
		i += k + 2 // past the backslash and the byte it escapes
	}
}

// unescaped maps the byte after a backslash to what it stands for, but u.
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unescape decodes the escape at s[j] (s is a string's text between its
// quotes), and returns what it stands for and where it ends. A surrogate
// pair is one escape; a lone surrogate is an error.
func unescape(s []byte, j int) (rune, int, error) {
	c := s[j+1]
	if c != 'u' {
		return rune(unescaped[c]), j + 2, nil
	}
	r := hex4(s[j+2:])
	j += 6
	if utf16.IsSurrogate(r) {
		var r2 rune = -1
		if j+6 <= len(s) && s[j] == '\\' && s[j+1] == 'u' {
			r2 = hex4(s[j+2:])
			j += 6
		}
		if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
			return 0, 0, fmt.Errorf("%w: a lone surrogate escape", errNotCanonical)
		}
	}
	return r, j, nil
}

// hex4 reads the four hex digits of a \u escape, which json.Valid checked.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// stringSize returns the size of the canonical form of the string whose
// text between the quotes is s, and checks its escapes.
func stringSize(s []byte) (int, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		return len(s) + 2, nil // canonical as it is
	}
	n := 2
	for j := 0; j < len(s); {
		if s[j] != '\\' {
			n++
			j++
			continue
		}
		r, next, err := unescape(s, j)
		if err != nil {
			return 0, err
		}
		switch {
		case r == '"' || r == '\\':
			n += 2
		case r < 0x20:
			n += len(`\u0000`)
		default:
			n += utf8.RuneLen(r)
		}
		j = next
	}
	return n, nil
}

// appendString appends the canonical form of the string whose text between
// the quotes is s (which read checked): quoted, escaping only what JSON
// requires, \" and \\, and \u00XX for control characters.
func appendString(out, s []byte) []byte {
	out = append(out, '"')
	for {
		k := bytes.IndexByte(s, '\\')
		if k < 0 {
			out = append(out, s...)
			return append(out, '"')
		}
		out = append(out, s[:k]...)
		r, next, _ := unescape(s, k)
		switch {
		case r == '"' || r == '\\':
			out = append(out, '\\', byte(r))
		case r < 0x20:
			out = append(out, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
		default:
			out = utf8.AppendRune(out, r)
		}
		s = s[next:]
	}
}

const hexDigits = "0123456789abcdef"

// appendDecoded appends the string whose text between the quotes is s
// (which read checked) decoded.
func appendDecoded(out, s []byte) []byte {
	d := decoder{s: s}
	for c, ok := d.next(); ok; c, ok = d.next() {
		out = append(out, c)
	}
	return out
}

// compareNames compares the names whose texts between the quotes are x and
// y (which read checked) by the bytes of their decoded UTF-8.
func compareNames(x, y []byte) int {
	if bytes.IndexByte(x, '\\') < 0 && bytes.IndexByte(y, '\\') < 0 {
		return bytes.Compare(x, y)
	}
	dx, dy := decoder{s: x}, decoder{s: y}
	for {
		cx, okx := dx.next()
		cy, oky := dy.next()
		switch {
		case !okx || !oky:
			return cmp.Compare(b2i(okx), b2i(oky))
		case cx != cy:
			return cmp.Compare(cx, cy)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// decoder yields the bytes of the decoded text of a string, one at a time.
type decoder struct {
	s       []byte // what is left of the text
	buf     [utf8.UTFMax]byte
	at, end int // what is left of the last escape's UTF-8, in buf
}

func (d *decoder) next() (byte, bool) {
	if d.at < d.end {
		d.at++
		return d.buf[d.at-1], true
	}
	if len(d.s) == 0 {
		return 0, false
	}
	if c := d.s[0]; c != '\\' {
		d.s = d.s[1:]
		return c, true
	}
	r, next, _ := unescape(d.s, 0)
	d.s = d.s[next:]
	d.at, d.end = 1, utf8.EncodeRune(d.buf[:], r)
	return d.buf[0], true
}
