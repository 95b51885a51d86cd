package canonjson

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// referenceBodies are bodies on which Form and the reference it
// replaced must agree: canonical forms, and which error comes first.
var referenceBodies = []string{
	` {"b":[1,2.50,-0],"a":{"x":"\u0041"}} `, `[1e400,0.1e-3]`, `"a\"\\\u0001"`, `{"a":1,"a":1}`,
	`{}`, `[]`, `null`, ` 7 `, `[1,]`, `"\ud83d\ude00"`, `{"a":{}}`, `{ }`, `[ ]`, "\t[\n{ } , [ ] ]\r",
	// Sorted objects in arrays in sorted objects, and back.
	`{"z":[{"b":1,"a":2},{"d":[{"y":0,"x":1}],"c":{}}],"y":{"k":{"m":1},"j":[[{"q":1,"p":2}]]},"a":0}`,
	`[{"b":{"d":{"f":1,"e":2},"c":3},"a":[{"h":1,"g":{"j":1,"i":2}}]},{"a":1}]`,
	`{ "b" : { "d" : 1 , "c" : [ 1 , { "f" : 1 , "e" : 2 } ] } , "a" : "x" }`,
	`{"a":{"b":{"c":{"e":1,"d":2}}},"0":1}`,
	// Names: escapes, sorted by their decoded bytes, duplicates however spelled.
	`{"\u00e9":1,"\u0065":2,"e\u0301":3,"\ud83d\ude00":4,"\uffff":5,"\/":6,"/a":7}`,
	`{"a\u0000":1,"a":2,"a\u0000b":3,"\"":4,"\\":5,"\n":6,"\b":7}`,
	`{"ab":1,"a\u0062":2}`, `{"é":1,"\u00e9":2}`, `{"😀":1,"\ud83d\ude00":2}`,
	`[{"a":1},{"b":1,"c":2,"b":3}]`, `{"x":{"a":1,"a":2},"y":"\ud800"}`, `{"x":"\udc00","a":1,"a":2}`,
	`{"b":{"a":1,"a":2},"a":{"c":1,"c":2}}`, `{"b":1,"a":1,"b":2,"a":2}`,
	`{"\ud800":1,"a":2}`, `{"a":"\ud800\u0041"}`, `["\ud83d"]`, `["\ude00\ud83d"]`, `"\ud83d\\ude00"`,
	// Strings.
	`"\b\f\n\r\t\u001f\u007f\u0080\u2028\"\\\/"`, `"\u0000"`, `"x\u0041y"`, `"日本"`, `"\\\\\\"`, `"\\\""`,
	// Numbers.
	`[0,-0,0.0,-0.0e5,0E-7,00e1]`, `[1e2147483647,1e-2147483648,10e2147483646,0.1e-2147483647]`,
	`10e2147483647`, `0.1e-2147483648`, `1e2147483648`, `1e-2147483649`, `0e99999999999`, `-0.0e-2147483649`,
	`[1e+0002,1E-0002,1.000e0000000000000000000000000000000000000001]`, `[100,1.50,-2.50e3,0.00012,12345678901234567890123]`,
	`[10.00,-100.0100,0.000,1.0e-5,-7e0]`, `{"n":1e4294967296,"a":1,"a":1}`, `{"a":1,"a":1,"n":1e4294967296}`,
	// Refused by json.Valid or utf8.Valid.
	``, ` `, `sku=tea`, `{"a":1`, `{} {}`, "\"caf\xe9\"", `01`, `NaN`, `[1,]`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"b":0,"a":`, 9999) + "[]" + strings.Repeat("}", 9999),
}

func TestCanonicalJSONMatchesReference(t *testing.T) {
	for _, body := range referenceBodies {
		matchesReference(t, []byte(body))
	}
}

// FuzzCanonicalJSONMatchesReference checks that Form agrees with
// the reference it replaced on every body, and allocates its form once, at
// its size.
func FuzzCanonicalJSONMatchesReference(f *testing.F) {
	for _, body := range referenceBodies {
		if len(body) < 1000 { // the deep ones would slow the fuzzer down
			f.Add([]byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		matchesReference(t, body)
	})
}

func matchesReference(t *testing.T, body []byte) {
	t.Helper()
	got, err := Form(body)
	want, wantErr := referenceCanonicalJSON(body)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !bytes.Equal(got, want) || (got == nil) != (want == nil) {
		t.Fatalf("Form(%.200q): got (%.200q, %v), the reference (%.200q, %v)", body, got, err, want, wantErr)
	}
	if len(got) != cap(got) {
		t.Fatalf("Form(%.200q): %d bytes long in %d allocated", body, len(got), cap(got))
	}
}
