package idem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting CanonicalJSON follows, as encoding/json
// bounds its own (json.Valid refuses deeper): a body of a million '[' must
// not recurse a million deep.
const maxJSONDepth = 10000

// errNotCanonical is wrapped by every error CanonicalJSON returns.
var errNotCanonical = errors.New("idem: no canonical JSON form")

// FingerprintJSON is an [Options.Fingerprint] for JSON APIs: a body that is
// one JSON value is compared by its [CanonicalJSON] form, so a client
// library that re-encodes its request on a retry (another key order, other
// whitespace, 1.0 for 1) replays instead of being refused with 422. Any
// other body (empty, not JSON, or JSON CanonicalJSON declines) is compared
// byte for byte, as without the option: the middleware does not refuse a
// request the handler would have judged itself, and the handler's own 400
// for malformed JSON is stored and replayed like any answer. To refuse such
// bodies with 400 before the handler runs, use CanonicalJSON itself as the
// Fingerprint.
//
// The two cannot be confused: CanonicalJSON returns every canonical form
// unchanged, and a body compared by its bytes is one it refuses.
func FingerprintJSON(body []byte) ([]byte, error) {
	if c, err := CanonicalJSON(body); err == nil {
		return c, nil
	}
	return body, nil
}

// CanonicalJSON returns the canonical form of body, which must be exactly
// one JSON value (RFC 8259), surrounded by whitespace at most. Two bodies
// have the same form exactly when they differ only in what no JSON reader
// may treat as meaningful:
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
// requires it (\" and \\, and \u00XX for control characters). CanonicalJSON
// refuses, with an error, what it cannot compare safely: a body that is not
// valid UTF-8 or holds a lone surrogate escape (readers replace either with
// U+FFFD, so different bodies would read the same), an object with a
// duplicate member name (readers disagree on which one wins), a number
// whose exponent does not fit in 32 bits, and nesting deeper than 10000.
// It reads the body once, and no text is copied once per nesting level.
//
// It is the strict [Options.Fingerprint]: a body it refuses is answered 400
// (…/idempotency-body-invalid) before anything is reserved. FingerprintJSON
// is the lenient one.
func CanonicalJSON(body []byte) ([]byte, error) {
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not valid UTF-8", errNotCanonical)
	}
	// The parser below trusts the grammar json.Valid has checked, and
	// checks only what json.Valid lets through.
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not one JSON value", errNotCanonical)
	}
	p := parser{b: body}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body))
	return v.appendTo(out), nil
}

// jvalue is a parsed JSON value. The values are parsed whole before any is
// written, so that sorting an object's members moves values, not their
// text: a body of nested objects would otherwise be copied once per level.
// Text already canonical (most strings and integers) is not copied at all:
// it is a slice of the body.
type jvalue struct {
	text    []byte    // a scalar's canonical text; nil for a container
	object  bool      // with members; an array otherwise
	members []jmember // an object's, sorted by name
	elems   []jvalue  // an array's, in order
}

type jmember struct {
	name []byte // decoded
	v    jvalue
}

func (v *jvalue) appendTo(out []byte) []byte {
	switch {
	case v.text != nil:
		return append(out, v.text...)
	case v.object:
		out = append(out, '{')
		for i := range v.members {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendString(out, v.members[i].name)
			out = append(out, ':')
			out = v.members[i].v.appendTo(out)
		}
		return append(out, '}')
	}
	out = append(out, '[')
	for i := range v.elems {
		if i > 0 {
			out = append(out, ',')
		}
		out = v.elems[i].appendTo(out)
	}
	return append(out, ']')
}

// parser reads a body json.Valid has accepted, so it checks only what
// json.Valid lets through: lone surrogates, duplicate names, exponents.
type parser struct {
	b []byte
	i int
	// The elements and members of the containers being read, innermost
	// last: each container copies its own out once it is complete, so it
	// is allocated once, at its size.
	elems   []jvalue
	members []jmember
}

func (p *parser) space() {
	for p.i < len(p.b) && strings.IndexByte(" \t\n\r", p.b[p.i]) >= 0 {
		p.i++
	}
}

func (p *parser) value(depth int) (jvalue, error) {
	if depth > maxJSONDepth {
		return jvalue{}, fmt.Errorf("%w: nested deeper than %d", errNotCanonical, maxJSONDepth)
	}
	p.space()
	switch p.b[p.i] {
	case '{':
		return p.object(depth)
	case '[':
		return p.array(depth)
	case '"':
		start := p.i
		s, escaped, err := p.str()
		if !escaped {
			return jvalue{text: p.b[start:p.i]}, err // as it came, quotes and all
		}
		return jvalue{text: appendString(nil, s)}, err
	case 't':
		return p.literal("true"), nil
	case 'f':
		return p.literal("false"), nil
	case 'n':
		return p.literal("null"), nil
	}
	start := p.i
	for p.i < len(p.b) && strings.IndexByte("+-.0123456789eE", p.b[p.i]) >= 0 {
		p.i++
	}
	n, err := canonicalNumber(p.b[start:p.i])
	return jvalue{text: n}, err
}

func (p *parser) literal(lit string) jvalue {
	v := jvalue{text: p.b[p.i : p.i+len(lit)]}
	p.i += len(lit)
	return v
}

func (p *parser) array(depth int) (jvalue, error) {
	mark := len(p.elems)
	p.i++ // '['
	for p.space(); p.b[p.i] != ']'; p.space() {
		e, err := p.value(depth + 1)
		if err != nil {
			return jvalue{}, err
		}
		p.elems = append(p.elems, e)
		p.space()
		if p.b[p.i] == ',' {
			p.i++
		}
	}
	p.i++                                                     // ']'
	v := jvalue{elems: append([]jvalue{}, p.elems[mark:]...)} // not nil: [] is a container
	p.elems = p.elems[:mark]
	return v, nil
}

func (p *parser) object(depth int) (jvalue, error) {
	mark := len(p.members)
	p.i++ // '{'
	for p.space(); p.b[p.i] != '}'; p.space() {
		name, _, err := p.str()
		if err != nil {
			return jvalue{}, err
		}
		p.space()
		p.i++ // ':'
		m, err := p.value(depth + 1)
		if err != nil {
			return jvalue{}, err
		}
		p.members = append(p.members, jmember{name, m})
		p.space()
		if p.b[p.i] == ',' {
			p.i++
		}
	}
	p.i++ // '}'
	v := jvalue{object: true, members: slices.Clone(p.members[mark:])}
	p.members = p.members[:mark]
	slices.SortFunc(v.members, func(a, b jmember) int { return bytes.Compare(a.name, b.name) })
	for i := 1; i < len(v.members); i++ {
		if bytes.Equal(v.members[i].name, v.members[i-1].name) {
			return jvalue{}, fmt.Errorf("%w: duplicate member %q", errNotCanonical, v.members[i].name)
		}
	}
	return v, nil
}

// str decodes the string whose opening quote is at p.i, and reports whether
// it held an escape. Without one (the common case) s is a slice of the body.
func (p *parser) str() (s []byte, escaped bool, err error) {
	p.i++
	start := p.i
	for p.b[p.i] != '"' && p.b[p.i] != '\\' {
		p.i++
	}
	if p.b[p.i] == '"' {
		p.i++
		return p.b[start : p.i-1], false, nil
	}
	s = append([]byte(nil), p.b[start:p.i]...)
	for {
		switch c := p.b[p.i]; c {
		case '"':
			p.i++
			return s, true, nil
		case '\\':
			if s, err = p.escape(s); err != nil {
				return nil, true, err
			}
		default:
			s = append(s, c)
			p.i++
		}
	}
}

// unescaped maps the byte after a backslash to what it stands for, but u.
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escape decodes the escape at p.i onto s.
func (p *parser) escape(s []byte) ([]byte, error) {
	c := p.b[p.i+1]
	p.i += 2
	if c != 'u' {
		return append(s, unescaped[c]), nil
	}
	r := p.hex4()
	if utf16.IsSurrogate(r) {
		var r2 rune = -1
		if p.i+6 <= len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
			p.i += 2
			r2 = p.hex4()
		}
		if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
			return nil, fmt.Errorf("%w: a lone surrogate escape", errNotCanonical)
		}
	}
	return utf8.AppendRune(s, r), nil
}

// hex4 reads the four hex digits of a \u escape.
func (p *parser) hex4() rune {
	n, _ := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32) // json.Valid checked them
	p.i += 4
	return rune(n)
}

// appendString appends s quoted, escaping only what JSON requires.
func appendString(out, s []byte) []byte {
	out = append(out, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c < 0x20:
			out = fmt.Appendf(out, `\u%04x`, c)
		default:
			out = append(out, c)
		}
	}
	return append(out, '"')
}

// canonicalNumber returns the JSON number text n (which json.Valid has
// checked) as its significant digits and a power of ten: "1.50" is 15e-1.
// An integer without trailing zeros is canonical already, and returned as
// it is.
func canonicalNumber(n []byte) ([]byte, error) {
	if bytes.IndexAny(n, ".eE") < 0 && n[len(n)-1] != '0' {
		return n, nil
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
		e, err := strconv.ParseInt(string(expText), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: the exponent of %s does not fit in 32 bits", errNotCanonical, n)
		}
		exp = e
	}
	whole, frac, _ := bytes.Cut(mant, []byte("."))
	digits := bytes.TrimLeft(append(slices.Clip(whole), frac...), "0")
	if len(digits) == 0 {
		return []byte("0"), nil // every zero, -0 among them
	}
	trimmed := bytes.TrimRight(digits, "0")
	exp += int64(len(digits)-len(trimmed)) - int64(len(frac))
	if exp < math.MinInt32 || exp > math.MaxInt32 {
		return nil, fmt.Errorf("%w: the exponent of %s does not fit in 32 bits", errNotCanonical, n)
	}
	var out []byte
	if neg {
		out = append(out, '-')
	}
	out = append(out, trimmed...)
	if exp != 0 {
		out = append(out, 'e')
		out = strconv.AppendInt(out, exp, 10)
	}
	return out, nil
}
