package porch_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/writeonce/porch-go/porch"
)

// holder stands for a middleware that takes something in Before (an
// idempotency key) and must give it back in After.
type holder struct{ gaveBack *porch.Completion }

func (holder) Before(r *http.Request) (*http.Request, *porch.Response) { return r, nil }
func (h holder) After(_ *http.Request, _ *porch.Response, c porch.Completion) {
	*h.gaveBack = c
}

type panicker struct{}

func (panicker) Before(*http.Request) (*http.Request, *porch.Response) { panic("key function failed") }
func (panicker) After(*http.Request, *porch.Response, porch.Completion) {
	panic("After of a Before that never returned must not run")
}

// A Before that panics is a 500, and the after hooks of the middlewares
// before it still run, told it panicked; the handler does not run.
func TestChainBeforePanicStillRunsEarlierAfters(t *testing.T) {
	got := porch.Completion(-1)
	ran := false
	h := porch.Chain(holder{&got}, panicker{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status: got %d, want 500", rec.Code)
	}
	if got != porch.Panicked {
		t.Fatalf("the earlier middleware's After: got %v, want %v", got, porch.Panicked)
	}
	if ran {
		t.Fatal("the handler ran after a Before panicked")
	}
}

// afterPanicker's After panics; its Before passes.
type afterPanicker struct{}

func (afterPanicker) Before(r *http.Request) (*http.Request, *porch.Response) { return r, nil }
func (afterPanicker) After(*http.Request, *porch.Response, porch.Completion) {
	panic("header formatting failed")
}

// An After that panics is a 500, and the after hooks before it still run,
// told the request panicked: an idempotency key held by an earlier
// middleware must be given back and its response not stored. Unrecovered,
// the panic skipped them and wedged the key.
func TestChainAfterPanicStillRunsEarlierAfters(t *testing.T) {
	got := porch.Completion(-1)
	h := porch.Chain(holder{&got}, afterPanicker{})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status: got %d, want 500", rec.Code)
	}
	if got != porch.Panicked {
		t.Fatalf("the earlier middleware's After: got %v, want %v", got, porch.Panicked)
	}
}
