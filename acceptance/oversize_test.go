//go:build acceptance

package acceptance

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// maxCheckoutBody is the storefront's cap on a checkout body
// (sample/storefront/shop.go).
const maxCheckoutBody = 64 << 10

// padded is mugOrder followed by spaces to n bytes: valid JSON, so that its
// size is the only thing wrong with it.
func padded(n int) string { return mugOrder + strings.Repeat(" ", n-len(mugOrder)) }

// longSKU is an order of n bytes whose sku is too long to be one, as a
// client that sends garbage would.
func longSKU(n int) string {
	const frame = `{"sku":"","qty":1}`
	return `{"sku":"` + strings.Repeat("x", n-len(frame)) + `","qty":1}`
}

// A checkout body over the cap is 413 problem+json, and nothing is stored
// under its key: a retry of the key with a body that fits runs the checkout.
// Bodies between the checkout's 64 KiB and idem's default 1 MiB were a 400
// malformed-body, stored, and a retry got 422 for a key it never used.
func TestIdemOversizeBodyNotStored(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t))
	cases := []struct {
		name string
		body string
	}{
		{"one byte over the cap, spaces after the object", padded(maxCheckoutBody + 1)},
		{"a 100 KiB sku", longSKU(100 << 10)},
		{"between the cap and 1 MiB, spaces after the object", padded(512 << 10)},
		{"over 1 MiB", padded(1<<20 + 1)},
	}
	var ids []string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := uuid.NewString()
			r := s.post(t, "/checkout", tc.body, keyHeader, key)
			checkProblem(t, r, http.StatusRequestEntityTooLarge)
			if got := rowCount(t, s.db, "porch_idem_responses"); got != len(ids) {
				t.Errorf("porch_idem_responses rows after a %d-byte body: got %d, want %d (the earlier retries' only)", len(tc.body), got, len(ids))
			}
			ids = append(ids, fresh(t, s.checkout(key, mugOrder)))
		})
	}
	t.Run("exactly the cap", func(t *testing.T) {
		ids = append(ids, fresh(t, s.post(t, "/checkout", padded(maxCheckoutBody), keyHeader, uuid.NewString())))
	})
	checkOrders(t, sqliteOrders(t, s.db), ids...)
	t.Logf("bodies over %d bytes: 413, nothing stored; their keys' retries ran", maxCheckoutBody)
}
