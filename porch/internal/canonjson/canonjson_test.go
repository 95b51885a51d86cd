package canonjson_test

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"runtime"
	"testing"

	"github.com/writeonce/porch-go/porch/internal/canonjson"
)

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"whitespace", " {\n\t\"a\" : [ 1 , 2 ] }\r\n", `{"a":[1,2]}`},
		{"member order", `{"b":1,"a":{"d":null,"c":true}}`, `{"a":{"c":true,"d":null},"b":1}`},
		{"names sort by their decoded bytes", `{"é":1,"z":2,"\u0041":3,"a":4}`, `{"A":3,"a":4,"z":2,"é":1}`},
		{"array order is kept", `[3,1,2]`, `[3,1,2]`},
		{"escapes decoded", `"\u0041\/\u00e9\t"`, `"A/é\u0009"`},
		{"quote and backslash stay escaped", `"a\"b\\c"`, `"a\"b\\c"`},
		{"integer", `12`, `12`},
		{"trailing zeros are an exponent", `100`, `1e2`},
		{"1.0 is 1", `1.0`, `1`},
		{"exponent spellings", `[1e0,1E+0,10e-1,0.1e1,0.01E2]`, `[1,1,1,1,1]`},
		{"fraction", `1.50`, `15e-1`},
		{"small", `0.00012`, `12e-5`},
		{"negative", `-2.50e3`, `-25e2`},
		{"zeros, -0 among them", `[0,-0,0.0,-0e5,0E-7]`, `[0,0,0,0,0]`},
		{"no rounding to float64", `[0.1,0.1000000000000000055511151231257827]`, `[1e-1,1000000000000000055511151231257827e-34]`},
		{"big integer exact", `12345678901234567890123`, `12345678901234567890123`},
		{"scalars", `[true,false,null,""]`, `[true,false,null,""]`},
		{"a bare string", `"x"`, `"x"`},
		{"unicode kept raw", `"日本\u2028"`, "\"日本\u2028\""},
		{"surrogate pair", `"\ud83d\ude00"`, `"😀"`},
		{"U+FFFD is a character like any other", `["\ufffd","�"]`, `["�","�"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := canonjson.Form([]byte(tc.in))
			if err != nil {
				t.Fatalf("Form(%s): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Errorf("Form(%s): got %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzCanonicalJSON checks that a canonical form is valid JSON, means what
// the body means, and is its own canonical form (so a body compared by its
// bytes under FingerprintJSON never matches a canonical one).
func FuzzCanonicalJSON(f *testing.F) {
	for _, seed := range []string{
		`{"b":[1,2.50,-0],"a":{"x":"\u0041"}}`, `[1e400,0.1e-3]`, `"a\"\\\u0001"`, `{"a":1,"a":1}`,
		`{}`, `[]`, `null`, ` 7 `, `[1,]`, `"\ud83d\ude00"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := canonjson.Form(body)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q of %q is not JSON", c, body)
		}
		again, err := canonjson.Form(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonical form %q of %q: got (%q, %v) again", c, body, again, err)
		}
		// As float64s (DeepEqual compares them with ==, so -0 is 0), when
		// every number fits one.
		var v1, v2 any
		if json.Unmarshal(body, &v1) != nil || json.Unmarshal(c, &v2) != nil {
			return
		}
		if !reflect.DeepEqual(v1, v2) {
			t.Fatalf("canonical form %q of %q reads as %v, want %v", c, body, v2, v1)
		}
	})
}

// TestCanonicalJSONMemory checks that a body of any shape costs a small
// multiple of its size: a parser with a node per value, as there was,
// allocated 250 times the size of [0,0,…], so that a few requests within
// MaxBody could exhaust memory before the handler ran. What is allowed
// over 8 times the size is for stacks as deep as the nesting, which
// json.Valid has of its own: a few hundred KiB at the deepest it allows.
func TestCanonicalJSONMemory(t *testing.T) {
	for _, bc := range hostileBodies() {
		t.Run(bc.name, func(t *testing.T) {
			body := []byte(bc.body)
			limit := 8*uint64(len(body)) + 512<<10
			allocated := uint64(math.MaxUint64)
			for range 3 { // the least, as another goroutine may allocate meanwhile
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				if _, err := canonjson.Form(body); err != nil {
					t.Fatal(err)
				}
				runtime.ReadMemStats(&after)
				allocated = min(allocated, after.TotalAlloc-before.TotalAlloc)
			}
			t.Logf("%d bytes allocated for a body of %d (%.1f times)", allocated, len(body), float64(allocated)/float64(len(body)))
			if allocated > limit {
				t.Errorf("%d bytes allocated for a body of %d, want at most %d", allocated, len(body), limit)
			}
		})
	}
}
