// Package canonjson writes the canonical form of a JSON body: the one
// spelling of its value that ignores what no JSON reader may treat as
// meaningful (whitespace, member order, escapes, how a number is written),
// exactly, with numbers compared as decimals and never rounded to float64.
// idem.CanonicalJSON documents the form and what is refused; idem's
// fingerprints are its only users.
//
// It is a codec of its own, not RFC 8785 (JCS): JCS compares numbers as
// IEEE doubles, so two bodies differing only in an integer past 2^53 would
// have one form, and a replay would be served for a different request.
package canonjson

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting Form follows, as encoding/json bounds
// its own (json.Valid refuses deeper): a body of a million '[' must not
// recurse a million deep.
const maxJSONDepth = 10000

// errNotCanonical is wrapped by every error Form returns. Its text has no
// package prefix: the caller's wrapper names itself ("idem: no canonical
// JSON form: …").
var errNotCanonical = errors.New("no canonical JSON form")

// Form returns the canonical form of body, which must be exactly one JSON
// value (RFC 8259), surrounded by whitespace at most, or an error wrapping
// errNotCanonical saying why it has none; see idem.CanonicalJSON for the
// form and what is refused. The form is allocated once, at its size.
func Form(body []byte) ([]byte, error) {
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
