package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inflightShop is the shop in process on a SQLite file with args added.
func inflightShop(t *testing.T, args ...string) http.Handler {
	t.Helper()
	cfg, err := parseFlags(append([]string{"-db", filepath.Join(t.TempDir(), "sf.db")}, args...))
	if err != nil {
		t.Fatal(err)
	}
	app, err := newShop(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close(context.Background()) })
	return app
}

// send serves one request of the client 192.0.2.1 (key: its
// Idempotency-Key, if any).
func send(h http.Handler, method, path, key string) *httptest.ResponseRecorder {
	var body *strings.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"sku":"mug","qty":1}`)
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, path, body)
	r.RemoteAddr = "192.0.2.1:40000"
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// holdSlot starts a slow checkout of the client and returns once it holds
// the client's one slot (a GET of the client is refused by the in-flight
// limiter), with the channel its answer arrives on.
func holdSlot(t *testing.T, h http.Handler) <-chan *httptest.ResponseRecorder {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- send(h, http.MethodPost, "/checkout", "hold-"+time.Now().Format(time.RFC3339Nano)) }()
		for {
			w := send(h, http.MethodGet, "/products", "")
			if w.Code == http.StatusTooManyRequests && strings.Contains(w.Body.String(), "inflight-limited") {
				return done
			}
			select {
			case <-done: // a probe took the slot first: start again
			default:
				if time.Now().After(deadline) {
					t.Fatalf("the slow checkout never held the slot: last probe %d %s", w.Code, w.Body)
				}
				time.Sleep(time.Millisecond) // polling for the checkout to take its slot
				continue
			}
			break
		}
	}
}

// A checkout the in-flight limiter refuses reserves no idempotency key:
// its retry with the same key, once a slot is free, runs (201), not a
// replay of the 429 nor a 409 for a key in flight.
func TestInflightRefusalReservesNoKey(t *testing.T) {
	h := inflightShop(t, "-inflight-limit", "1", "-checkout-delay", "300ms")
	done := holdSlot(t, h)
	w := send(h, http.MethodPost, "/checkout", "k-refused")
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "inflight-limited") {
		t.Fatalf("a checkout while the slot is held: %d %s, want the in-flight 429", w.Code, w.Body)
	}
	if got := (<-done).Code; got != http.StatusCreated {
		t.Fatalf("the slow checkout: %d, want 201", got)
	}
	if w := send(h, http.MethodPost, "/checkout", "k-refused"); w.Code != http.StatusCreated {
		t.Fatalf("the refused checkout's retry with its key: %d %s, want 201", w.Code, w.Body)
	}
}

// A request the rate limiter refuses is refused before the in-flight
// limiter is asked: with the client's slot held and its rate spent, the
// answer is the rate limiter's 429, and it takes no slot.
func TestRateRefusalTakesNoSlot(t *testing.T) {
	h := inflightShop(t, "-inflight-limit", "1", "-checkout-delay", "300ms", "-rate-limit", "40", "-rate-window", "1m")
	done := holdSlot(t, h)
	var w *httptest.ResponseRecorder
	for range 60 {
		if w = send(h, http.MethodPost, "/checkout", ""); !strings.Contains(w.Body.String(), "inflight-limited") {
			break
		}
	}
	if w.Code != http.StatusTooManyRequests || strings.Contains(w.Body.String(), "inflight") {
		t.Fatalf("past the rate limit with the slot held: %d %s, want the rate limiter's 429", w.Code, w.Body)
	}
	<-done
}
