//go:build acceptance

package acceptance

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"testing"

	"github.com/google/uuid"
)

// GET /products is a JSON array of objects with at least a string sku and
// an integer price_cents.
func TestProducts(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t))
	r := s.get(t, "/products")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /products: got %s, want 200", r)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		t.Errorf("Content-Type: got %q, want application/json", r.Header.Get("Content-Type"))
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	var list []map[string]any
	if err := dec.Decode(&list); err != nil {
		t.Fatalf("GET /products body: %v (%s)", err, r.Body)
	}
	if len(list) == 0 {
		t.Fatalf("GET /products: got an empty array, want the shop's products")
	}
	for i, p := range list {
		if sku, ok := p["sku"].(string); !ok || sku == "" {
			t.Errorf("product %d sku: got %#v, want a non-empty string", i, p["sku"])
		}
		n, ok := p["price_cents"].(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			t.Errorf("product %d price_cents: got %#v, want an integer", i, p["price_cents"])
		}
	}
}

// POST /checkout writes exactly one orders row per accepted order and none
// for a request it refuses. Every request carries a fresh Idempotency-Key,
// which the checkout requires (issue 3), so that only the body is judged here.
func TestCheckout(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t))

	r := s.post(t, "/checkout", `{"sku":"mug","qty":1}`, "Idempotency-Key", uuid.NewString())
	if r.Status != http.StatusCreated {
		t.Fatalf("POST /checkout mug: got %s, want 201", r)
	}
	var o struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(r.Body, &o); err != nil {
		t.Fatalf("checkout body: %v (%s)", err, r.Body)
	}
	if _, err := uuid.Parse(o.OrderID); err != nil {
		t.Errorf("order_id: got %q, want a UUID", o.OrderID)
	}
	db := openDB(t, s.db)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM orders WHERE order_id = ?`, o.OrderID).Scan(&n); err != nil || n != 1 {
		t.Errorf("orders rows for %s: got %d (%v), want 1", o.OrderID, n, err)
	}

	// The contract asks for a 4xx problem, not a particular status.
	bad := []struct{ name, body string }{
		{"malformed JSON", `{"sku":`},
		{"not an object", `["mug"]`},
		{"zero qty", `{"sku":"mug","qty":0}`},
		{"unknown sku", `{"sku":"no-such-thing","qty":1}`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			r := s.post(t, "/checkout", tc.body, "Idempotency-Key", uuid.NewString())
			if r.Status < 400 || r.Status > 499 {
				t.Fatalf("POST /checkout %s: got %s, want a 4xx", tc.body, r)
			}
			checkProblem(t, r, r.Status)
		})
	}
	if got := rowCount(t, s.db, "orders"); got != 1 {
		t.Errorf("orders rows after the refused requests: got %d, want 1", got)
	}
}
