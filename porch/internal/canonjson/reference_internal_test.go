package canonjson

// This file keeps Form (idem.CanonicalJSON) as it was before it was rewritten to bound
// its memory (a pointer tree of 80-byte nodes, ~250 bytes allocated per
// byte of a body such as [0,0,…]), as the oracle the rewrite is checked
// against: the two must agree on every body, canonical form and error alike.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// referenceCanonicalJSON is Form as it was: see the file comment.
func referenceCanonicalJSON(body []byte) ([]byte, error) {
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not valid UTF-8", errNotCanonical)
	}
	// The refParser below trusts the grammar json.Valid has checked, and
	// checks only what json.Valid lets through.
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not one JSON value", errNotCanonical)
	}
	p := refParser{b: body}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body))
	return v.appendTo(out), nil
}

// refValue is a parsed JSON value. The values are parsed whole before any is
// written, so that sorting an object's members moves values, not their
// text: a body of nested objects would otherwise be copied once per level.
// Text already canonical (most strings and integers) is not copied at all:
// it is a slice of the body.
type refValue struct {
	text    []byte      // a scalar's canonical text; nil for a container
	object  bool        // with members; an array otherwise
	members []refMember // an object's, sorted by name
	elems   []refValue  // an array's, in order
}

type refMember struct {
	name []byte // decoded
	v    refValue
}

func (v *refValue) appendTo(out []byte) []byte {
	switch {
	case v.text != nil:
		return append(out, v.text...)
	case v.object:
		out = append(out, '{')
		for i := range v.members {
			if i > 0 {
				out = append(out, ',')
			}
			out = refAppendString(out, v.members[i].name)
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

// refParser reads a body json.Valid has accepted, so it checks only what
// json.Valid lets through: lone surrogates, duplicate names, exponents.
type refParser struct {
	b []byte
	i int
	// The elements and members of the containers being read, innermost
	// last: each container copies its own out once it is complete, so it
	// is allocated once, at its size.
	elems   []refValue
	members []refMember
}

func (p *refParser) space() {
	for p.i < len(p.b) && strings.IndexByte(" \t\n\r", p.b[p.i]) >= 0 {
		p.i++
	}
}

func (p *refParser) value(depth int) (refValue, error) {
	if depth > maxJSONDepth {
		return refValue{}, fmt.Errorf("%w: nested deeper than %d", errNotCanonical, maxJSONDepth)
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
			return refValue{text: p.b[start:p.i]}, err // as it came, quotes and all
		}
		return refValue{text: refAppendString(nil, s)}, err
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
	n, err := refCanonicalNumber(p.b[start:p.i])
	return refValue{text: n}, err
}

func (p *refParser) literal(lit string) refValue {
	v := refValue{text: p.b[p.i : p.i+len(lit)]}
	p.i += len(lit)
	return v
}

func (p *refParser) array(depth int) (refValue, error) {
	mark := len(p.elems)
	p.i++ // '['
	for p.space(); p.b[p.i] != ']'; p.space() {
		e, err := p.value(depth + 1)
		if err != nil {
			return refValue{}, err
		}
		p.elems = append(p.elems, e)
		p.space()
		if p.b[p.i] == ',' {
			p.i++
		}
	}
	p.i++                                                         // ']'
	v := refValue{elems: append([]refValue{}, p.elems[mark:]...)} // not nil: [] is a container
	p.elems = p.elems[:mark]
	return v, nil
}

func (p *refParser) object(depth int) (refValue, error) {
	mark := len(p.members)
	p.i++ // '{'
	for p.space(); p.b[p.i] != '}'; p.space() {
		name, _, err := p.str()
		if err != nil {
			return refValue{}, err
		}
		p.space()
		p.i++ // ':'
		m, err := p.value(depth + 1)
		if err != nil {
			return refValue{}, err
		}
		p.members = append(p.members, refMember{name, m})
		p.space()
		if p.b[p.i] == ',' {
			p.i++
		}
	}
	p.i++ // '}'
	v := refValue{object: true, members: slices.Clone(p.members[mark:])}
	p.members = p.members[:mark]
	slices.SortFunc(v.members, func(a, b refMember) int { return bytes.Compare(a.name, b.name) })
	for i := 1; i < len(v.members); i++ {
		if bytes.Equal(v.members[i].name, v.members[i-1].name) {
			return refValue{}, fmt.Errorf("%w: duplicate member %q", errNotCanonical, v.members[i].name)
		}
	}
	return v, nil
}

// str decodes the string whose opening quote is at p.i, and reports whether
// it held an escape. Without one (the common case) s is a slice of the body.
func (p *refParser) str() (s []byte, escaped bool, err error) {
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

// refUnescaped maps the byte after a backslash to what it stands for, but u.
var refUnescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escape decodes the escape at p.i onto s.
func (p *refParser) escape(s []byte) ([]byte, error) {
	c := p.b[p.i+1]
	p.i += 2
	if c != 'u' {
		return append(s, refUnescaped[c]), nil
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
func (p *refParser) hex4() rune {
	n, _ := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32) // json.Valid checked them
	p.i += 4
	return rune(n)
}

// refAppendString appends s quoted, escaping only what JSON requires.
func refAppendString(out, s []byte) []byte {
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

// refCanonicalNumber returns the JSON number text n (which json.Valid has
// checked) as its significant digits and a power of ten: "1.50" is 15e-1.
// An integer without trailing zeros is canonical already, and returned as
// it is.
func refCanonicalNumber(n []byte) ([]byte, error) {
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
