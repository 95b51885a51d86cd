//go:build acceptance

package acceptance

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
)

// from is s with a client whose connections come from source, another
// loopback address: to the storefront, another client.
func (s *storefront) from(source string) *storefront {
	other := *s
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	other.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext}}
	return &other
}

// The storefront sets no principal, so its keys are scoped by the client's
// address: two clients that send the same key (and body) each get their
// own order, and each one's retry replays its own. With one global key
// space the second client was answered the first's stored response.
func TestIdemKeyScopedByClient(t *testing.T) {
	t.Parallel()
	a := startStorefront(t, newDB(t))
	b := a.from("127.0.0.2")
	key := uuid.NewString()

	firstA := a.checkout(key, mugOrder)
	idA := fresh(t, firstA)
	firstB := b.checkout(key, mugOrder)
	idB := fresh(t, firstB)
	if idA == idB {
		t.Fatalf("two clients, one key: both got order %s, want one order each", idA)
	}
	checkReplay(t, a.checkout(key, mugOrder), firstA)
	checkReplay(t, b.checkout(key, mugOrder), firstB)
	checkOrders(t, sqliteOrders(t, a.db), idA, idB)
}
