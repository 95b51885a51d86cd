package idem

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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
// It allocates a small multiple of the body's size, whatever its shape:
// the canonical form (at most three times the body, for a string of \n
// escapes, written \u000a), 8 bytes for each member of an object of two
// members or more and 16 for the object (those it must sort), and stacks
// as deep as the nesting. A body such as [0,0,…] or [{},{},…] costs its
// form and no more. Its time is linear in the body's size, but for
// sorting names, at any depth.
//
// It is the strict [Options.Fingerprint]: a body it refuses is answered 400
// (…/idempotency-body-invalid) before anything is reserved. FingerprintJSON
// is the lenient one.
func CanonicalJSON(body []byte) ([]byte, error) {
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not valid UTF-8", errNotCanonical)
	}
	// The reader below trusts the grammar json.Valid has checked, and
	// checks only what json.Valid lets through.
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not one JSON value", errNotCanonical)
	}
	if uint64(len(body)) <= math.MaxUint32 {
		return canonical[uint32](body)
	}
	return canonical[uint64](body)
}

// The canonical form is written in three passes over the body, none of
// which builds a node per value: what they keep is counted in bytes per
// member of an object that must be sorted, not per value.
//
//  1. measure counts those objects and members, so that what the second
//     pass keeps is allocated once, at its size (a slice grown by append
//     allocates up to five times its final size in all);
//  2. read checks what json.Valid lets through, adds up the form's size,
//     and sorts the members of each object of two members or more,
//     keeping them as spans of the body;
//  3. write copies the body's tokens to the form in their order, but for
//     such an object, whose members it writes in sorted order, each
//     member's value read from where it is in the body.
//
// Arrays, objects of one member or none, and scalars are written as they
// are read: nothing about them is kept.

// offset is an offset into the body, or an index into what read keeps: 32
// bits for any body under 4 GiB, which halves what is kept.
type offset interface{ ~uint32 | ~uint64 }

// member is a member of an object: its name's text in the body, quotes
// excluded, escapes not decoded.
type member[T offset] struct{ name, end T }

// object is an object of two members or more.
type object[T offset] struct {
	start, end T // its text in the body, braces included
	lo, hi     T // its members, sorted, in canon.members
}

// canon is what read keeps of a body for write.
type canon[T offset] struct {
	b []byte
	// members holds, in members[:kept], the members of each of objects in
	// turn, sorted; and in members[pending:], those of the objects being
	// read, innermost first. Together they never hold more than the body's
	// members, and measure counts how many exactly.
	members       []member[T]
	kept, pending int
	objects       []object[T] // sorted by start once read is done
	size          int         // of the canonical form
}

func canonical[T offset](b []byte) ([]byte, error) {
	s := measure[T](b)
	c := canon[T]{
		b:       b,
		members: make([]member[T], s.members),
		pending: s.members,
		objects: make([]object[T], 0, s.objects),
	}
	if err := c.read(s.depth); err != nil {
		return nil, err
	}
	// read closes objects innermost first; write looks them up by start.
	slices.SortFunc(c.objects, func(x, y object[T]) int { return cmp.Compare(x.start, y.start) })
	return c.write(make([]byte, 0, c.size), min(s.depth, s.objects)), nil
}

// shape is what measure counts of a body.
type shape struct {
	objects int // of two members or more
	members int // the most canon.members holds at once
	depth   int // the most objects open at once
}

// measure counts what read keeps of b.
func measure[T offset](b []byte) shape {
	var s shape
	// Each open object's members so far, innermost last; grown by
	// doubling, as a slice grown by append grows by a quarter once large.
	open := make([]T, 0, 16)
	kept, pending := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
		case '{':
			if len(open) == cap(open) {
				open = append(make([]T, 0, 2*cap(open)), open...)
			}
			open = append(open, 0)
			s.depth = max(s.depth, len(open))
		case ':':
			open[len(open)-1]++
			pending++
			s.members = max(s.members, kept+pending)
		case '}':
			n := int(open[len(open)-1])
			open = open[:len(open)-1]
			pending -= n
			if n >= 2 {
				s.objects++
				kept += n
			}
		}
	}
	return s
}

// read reads the body as json.Valid has accepted it, checking what
// json.Valid lets through (lone surrogates, duplicate names, exponents) in
// the order of the body, and keeps the members of each object of two
// members or more, sorted. depth is the most objects open at once.
func (c *canon[T]) read(depth int) error {
	b := c.b
	type frame struct{ start, mark T } // an open object: its '{', c.pending after its members
	open := make([]frame, 0, depth)
	nest := 0 // containers open
	for i := 0; i < len(b); {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
			continue
		case '{', '[':
			// json.Valid refuses deeper nesting already.
			if nest >= maxJSONDepth {
				return fmt.Errorf("%w: nested deeper than %d", errNotCanonical, maxJSONDepth)
			}
			nest++
			if b[i] == '{' {
				open = append(open, frame{T(i), T(c.pending)})
			}
		case ']':
			nest--
		case '}':
			nest--
			f := open[len(open)-1]
			open = open[:len(open)-1]
			if err := c.close(f.start, T(i+1), int(f.mark)); err != nil {
				return err
			}
		case ',', ':':
		case '"':
			end := stringEnd(b, i)
			n, err := stringSize(b[i+1 : end-1])
			if err != nil {
				return err
			}
			c.size += n
			if j := skipSpace(b, end); j < len(b) && b[j] == ':' {
				c.pending--
				c.members[c.pending] = member[T]{T(i + 1), T(end - 1)}
			}
			i = end
			continue
		case 't', 'n':
			c.size += 4
			i += 4
			continue
		case 'f':
			c.size += 5
			i += 5
			continue
		default:
			end := numberEnd(b, i)
			n, err := parseNumber(b[i:end])
			if err != nil {
				return err
			}
			c.size += n.size()
			i = end
			continue
		}
		c.size++ // the punctuation at i
		i++
	}
	return nil
}

// close closes the object at b[start:end] whose members are
// members[pending:mark], last first: one of two members or more has them
// sorted, checked for duplicates, and kept.
func (c *canon[T]) close(start, end T, mark int) error {
	ms := c.members[c.pending:mark]
	c.pending = mark
	if len(ms) < 2 {
		return nil
	}
	b := c.b
	slices.SortFunc(ms, func(x, y member[T]) int { return compareNames(b[x.name:x.end], b[y.name:y.end]) })
	for k := 1; k < len(ms); k++ {
		if name := b[ms[k].name:ms[k].end]; compareNames(b[ms[k-1].name:ms[k-1].end], name) == 0 {
			return fmt.Errorf("%w: duplicate member %q", errNotCanonical, appendDecoded(nil, name))
		}
	}
	// The pending members are after the kept ones: copy moves them down.
	lo := c.kept
	c.kept += copy(c.members[c.kept:], ms)
	c.objects = append(c.objects, object[T]{start, end, T(lo), T(c.kept)})
	return nil
}

// write appends the canonical form of the body to out; depth is the most
// objects of two members or more open at once, or more.
func (c *canon[T]) write(out []byte, depth int) []byte {
	b := c.b
	// An object being written whose members are sorted: the member being
	// written, and the level the object is at.
	type frame struct{ obj, next, level T }
	open := make([]frame, 0, depth)
	// level counts the containers open that are written as they are read,
	// since the body or the member value being written began: when it is
	// back to 0, that value is written.
	level := 0
	last := -1 // the sorted object written last
	for i := 0; ; {
		switch ch := b[i]; ch {
		case ' ', '\t', '\n', '\r':
			i++
			continue
		case '[':
			out = append(out, ch)
			i++
			level++
			continue
		case ',', ':':
			out = append(out, ch)
			i++
			continue
		case ']', '}':
			out = append(out, ch)
			i++
			level--
		case '{':
			// Sorted objects come in the order of the body but where a
			// member's value is written out of it: try the next first.
			k, sorted := last+1, last+1 < len(c.objects) && c.objects[last+1].start == T(i)
			if !sorted {
				k, sorted = slices.BinarySearchFunc(c.objects, T(i), func(o object[T], start T) int { return cmp.Compare(o.start, start) })
			}
			if !sorted {
				out = append(out, ch)
				i++
				level++
				continue
			}
			last = k
			open = append(open, frame{obj: T(k), level: T(level)})
			out = append(out, ch)
			out, i = c.member(out, c.members[c.objects[k].lo])
			level = 0
			continue
		case '"':
			end := stringEnd(b, i)
			out = appendString(out, b[i+1:end-1])
			i = end
		case 't', 'n':
			out = append(out, b[i:i+4]...)
			i += 4
		case 'f':
			out = append(out, b[i:i+5]...)
			i += 5
		default:
			end := numberEnd(b, i)
			n, _ := parseNumber(b[i:end]) // read checked it
			out = n.appendTo(out)
			i = end
		}
		if level > 0 {
			continue
		}
		// A value is written: the body, or the value of a member of the
		// innermost sorted object.
		for {
			if len(open) == 0 {
				return out
			}
			f := &open[len(open)-1]
			o := &c.objects[f.obj]
			if f.next++; o.lo+f.next < o.hi {
				out = append(out, ',')
				out, i = c.member(out, c.members[o.lo+f.next])
				level = 0
				break
			}
			out = append(out, '}')
			i, level = int(o.end), int(f.level)
			open = open[:len(open)-1]
			if level > 0 {
				break
			}
		}
	}
}

// member appends m's name and colon to out, and returns where m's value
// begins in the body.
func (c *canon[T]) member(out []byte, m member[T]) ([]byte, int) {
	out = appendString(out, c.b[m.name:m.end])
	out = append(out, ':')
	i := skipSpace(c.b, int(m.end)+1) // past the closing quote
	return out, i + 1                 // past the colon
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

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

// numberEnd returns the end of the number that begins at b[i].
func numberEnd(b []byte, i int) int {
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		i++
	}
	return i
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
