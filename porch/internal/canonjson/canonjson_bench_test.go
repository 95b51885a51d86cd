package canonjson_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch/internal/canonjson"
)

// BenchmarkCanonicalJSON measures a MaxBody-sized body of many small
// objects, and one of objects nested as deep as allowed around a long
// string, which a writer that copied each member's text into its parent
// would copy once per level (seconds, not milliseconds); then the bodies of
// hostileBodies, which a parser allocating a node per value turns into a
// hundred times their size.
func BenchmarkCanonicalJSON(b *testing.B) {
	bodies := []struct{ name, body string }{
		{"wide", "[" + strings.Repeat(`{"b":1,"a":[1,2.0,"x"]},`, 40000) + "0]"},
		{"deep", strings.Repeat(`{"b":0,"a":`, 10000) + `"` + strings.Repeat("x", 900000) + `"` + strings.Repeat("}", 10000)},
	}
	bodies = append(bodies, hostileBodies()...)
	for _, bc := range bodies {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := canonjson.Form(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// hostileBodies are bodies of about idem's default MaxBody, each of a
// shape that makes the most values, members, objects, nesting or output
// per byte.
func hostileBodies() []struct{ name, body string } {
	const size = 1 << 20 // idem.Options.MaxBody's default
	// fill repeats unit between open and close to about size bytes.
	fill := func(open, unit, last, close string) string {
		n := (size - len(open) - len(last) - len(close)) / len(unit)
		return open + strings.Repeat(unit, n) + last + close
	}
	// keys returns an object of about n bytes of members of distinct short
	// names, spelled by spell, without its closing brace.
	keys := func(n int, spell func(i int) string, value string) string {
		var s strings.Builder
		s.WriteString("{")
		for i := 0; s.Len() < n-32; i++ {
			if i > 0 {
				s.WriteString(",")
			}
			s.WriteString(`"` + spell(i) + `":` + value)
		}
		return s.String()
	}
	base36 := func(i int) string { return strconv.FormatInt(int64(i), 36) }
	const depth = 10000 // as deep as json.Valid allows
	return []struct{ name, body string }{
		{"zeros", fill("[", "0,", "0", "]")},
		{"empty arrays", fill("[", "[],", "[]", "]")},
		{"empty objects", fill("[", "{},", "{}", "]")},
		{"one-member objects", fill("[", `{"a":0},`, `{"a":0}`, "]")},
		{"two-member objects", fill("[", `{"b":0,"a":0},`, `{"b":0,"a":0}`, "]")},
		{"many members", keys(size, base36, "0") + "}"},
		{"many escaped members", keys(size, func(i int) string { return `\u0041` + base36(i) }, "0") + "}"},
		{"members of empty objects", keys(size, base36, "{}") + "}"},
		{"control escapes", fill(`"`, `\n`, "", `"`)},
		{"decimals", fill("[", "1.1,", "1.1", "]")},
		{"deep arrays", strings.Repeat("[", depth) + strings.Repeat("]", depth)},
		{"deep objects", strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)},
		{"deep two-member objects", strings.Repeat(`{"b":0,"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)},
		{"deep members", keys(size-120000, base36, "0") + `,"~":` + strings.Repeat(`{"b":0,"a":`, depth-2) +
			"{}" + strings.Repeat("}", depth-2) + "}"},
	}
}
