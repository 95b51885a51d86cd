package redis

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
)

// The hash tag is what every earlier version wrote (hash/fnv's 64-bit
// FNV-1a of the principal part, as 16 hex digits): instances of two
// versions sharing a server must count one key in one place.
func TestHashTagAsBefore(t *testing.T) {
	before := func(key string) string {
		rest := key
		if after, ok := strings.CutPrefix(key, "rate:"); ok {
			if i := strings.IndexByte(after, ':'); i >= 0 {
				rest = after[i+1:]
			}
		}
		h := fnv.New64a()
		h.Write([]byte(rest))
		return fmt.Sprintf("%016x", h.Sum64())
	}
	s := &Store{opt: Options{Prefix: "porch:"}}
	keys := []string{"", "rate:", "rate:a", "rate:a:", "rate:api:p:alice", "rate:api:ip:10.0.0.1", "policy:api", "x"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		keys = append(keys, "rate:n:"+string(b), string(b))
	}
	for _, k := range keys {
		if got, want := hashTag(k), before(k); got != want {
			t.Fatalf("hashTag(%q) = %s, want %s", k, got, want)
		}
		if got, want := s.counterKey(k), "porch:{"+before(k)+"}"+k; got != want {
			t.Fatalf("counterKey(%q) = %q, want %q", k, got, want)
		}
	}
}
