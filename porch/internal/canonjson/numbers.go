package canonjson

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
)

// This file holds what the form needs of JSON numbers: where one ends,
// and its canonical spelling, an exact decimal's significant digits and
// exponent.

// numberEnd returns the end of the number that begins at b[i].
func numberEnd(b []byte, i int) int {
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		i++
	}
	return i
}

// number is a JSON number in canonical form: text that is canonical as it
// is, or a sign, significant digits (digits, then more) and an exponent.
type number struct {
	text         []byte
	neg          bool
	digits, more []byte
	exp          int64
}

// zero is the canonical form of every zero, -0 among them.
var zero = []byte("0")

// parseNumber returns the canonical form of the JSON number text n (which
// json.Valid has checked): its significant digits and a power of ten, so
// "1.50" is 15e-1. An integer without trailing zeros is canonical already.
func parseNumber(n []byte) (number, error) {
	if bytes.IndexAny(n, ".eE") < 0 && n[len(n)-1] != '0' {
		return number{text: n}, nil
	}
	neg := n[0] == '-'
	if neg {
		n = n[1:]
	}
	mant, expText := n, []byte(nil)
	if i := bytes.IndexAny(n, "eE"); i >= 0 {
		mant, expText = n[:i], n[i+1:]
	}
	var exp int64
	if expText != nil {
		var ok bool
		if exp, ok = parseExponent(expText); !ok {
			return number{}, fmt.Errorf("%w: the exponent of %s does not fit in 32 bits", errNotCanonical, n)
		}
	}
	whole, frac, _ := bytes.Cut(mant, []byte("."))
	// The significant digits are those of whole then frac, without
	// leading or trailing zeros.
	digits, more := bytes.TrimLeft(whole, "0"), frac
	if len(digits) == 0 {
		more = bytes.TrimLeft(frac, "0")
	}
	if len(digits) == 0 && len(more) == 0 {
		return number{text: zero}, nil
	}
	trailing := len(more)
	more = bytes.TrimRight(more, "0")
	trailing -= len(more)
	if len(more) == 0 {
		trailing += len(digits)
		digits = bytes.TrimRight(digits, "0")
		trailing -= len(digits)
	}
	exp += int64(trailing) - int64(len(frac))
	if exp < math.MinInt32 || exp > math.MaxInt32 {
		return number{}, fmt.Errorf("%w: the exponent of %s does not fit in 32 bits", errNotCanonical, n)
	}
	return number{neg: neg, digits: digits, more: more, exp: exp}, nil
}

// parseExponent parses the digits of an exponent, signed or not, as
// strconv.ParseInt(…, 10, 32) would, but without allocating for a long one.
func parseExponent(e []byte) (int64, bool) {
	neg := e[0] == '-'
	if e[0] == '-' || e[0] == '+' {
		e = e[1:]
	}
	var v int64
	for _, c := range e {
		if v = v*10 + int64(c-'0'); v > -math.MinInt32 {
			return 0, false
		}
	}
	if neg {
		v = -v
	}
	return v, v >= math.MinInt32 && v <= math.MaxInt32
}

func (n *number) size() int {
	if n.text != nil {
		return len(n.text)
	}
	var buf [24]byte
	size := b2i(n.neg) + len(n.digits) + len(n.more)
	if n.exp != 0 {
		size += 1 + len(strconv.AppendInt(buf[:0], n.exp, 10))
	}
	return size
}

func (n *number) appendTo(out []byte) []byte {
	if n.text != nil {
		return append(out, n.text...)
	}
	if n.neg {
		out = append(out, '-')
	}
	out = append(append(out, n.digits...), n.more...)
	if n.exp != 0 {
		out = append(out, 'e')
		out = strconv.AppendInt(out, n.exp, 10)
	}
	return out
}
