package idem_test

import (
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

// BenchmarkCanonicalJSON measures a MaxBody-sized body of many small
// objects, and one of objects nested as deep as allowed around a long
// string, which a writer that copied each member's text into its parent
// would copy once per level (seconds, not milliseconds).
func BenchmarkCanonicalJSON(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"wide", "[" + strings.Repeat(`{"b":1,"a":[1,2.0,"x"]},`, 40000) + "0]"},
		{"deep", strings.Repeat(`{"b":0,"a":`, 10000) + `"` + strings.Repeat("x", 900000) + `"` + strings.Repeat("}", 10000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := idem.CanonicalJSON(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
