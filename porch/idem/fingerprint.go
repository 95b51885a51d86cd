package idem

import "github.com/writeonce/porch-go/porch/internal/canonjson"

// FingerprintJSON is an [Options.Fingerprint] for JSON APIs: a body that is
// one JSON value is compared by its canonical form, so a client library
// that re-encodes its request on a retry (another key order, other
// whitespace, 1.0 for 1) replays instead of being refused with 422. Any
// other body (empty, not JSON, or JSON that has no canonical form) is
// compared byte for byte, as without the option: the middleware does not
// refuse a request the handler would have judged itself, and the handler's
// own 400 for malformed JSON is stored and replayed like any answer. To
// refuse such bodies with 400 before the handler runs, set a Fingerprint
// that refuses them and returns FingerprintJSON's result for the rest.
//
// The two kinds cannot be confused: a canonical form is its own canonical
// form, and a body compared by its bytes has none.
//
// A body of exactly one JSON value (RFC 8259), surrounded by whitespace at
// most, has a canonical form, and two bodies have the same form exactly
// when they differ only in what no JSON reader may treat as meaningful:
//
//   - whitespace between tokens;
//   - the order of an object's members (members are sorted by the bytes of
//     their names' UTF-8);
//   - how a string is escaped ("\u0041" and "A" are the same string);
//   - how a number is written: numbers are equal when their exact decimal
//     values are, so 1, 1.0, 1e0, 10E-1 and 0.1e+1 are one number, and -0 is
//     0. They are not rounded to float64: 0.1 and
//     0.1000000000000000055511151231257827 differ, although both decode to
//     the same float64. The form is the decimal's significant digits with
//     no leading or trailing zero, then "e" and the exponent when it is not
//     zero: 100 is 1e2, 1.50 is 15e-1, 0.0 is 0.
//
// Array order, every string's value, and every number's value matter.
//
// The form is compact JSON: no whitespace, strings escaped only where JSON
// requires it (\" and \\, and \u00XX for control characters). What cannot
// be compared safely has none: a body that is not valid UTF-8 or holds a
// lone surrogate escape (readers replace either with U+FFFD, so different
// bodies would read the same), an object with a duplicate member name
// (readers disagree on which one wins), a number whose exponent does not
// fit in 32 bits, and nesting deeper than 10000. Computing the form
// allocates a small multiple of the body's size, whatever its shape:
// the canonical form (at most three times the body, for a string of \n
// escapes, written \u000a), 8 bytes for each member of an object of two
// members or more and 16 for the object (those it must sort), and stacks
// as deep as the nesting. A body such as [0,0,…] or [{},{},…] costs its
// form and no more. Its time is linear in the body's size, but for
// sorting names, at any depth.
func FingerprintJSON(body []byte) ([]byte, error) {
	if c, err := canonjson.Form(body); err == nil {
		return c, nil
	}
	return body, nil
}
