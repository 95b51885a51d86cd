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

// afterPanicker's After panics; its Before passes.
type afterPanicker struct{}

func (afterPanicker) Before(r *http.Request) (*http.Request, *porch.Response) { return r, nil }
func (afterPanicker) After(*http.Request, *porch.Response, porch.Completion) {
	panic("header formatting failed")
}

// A hook that panics, Before or After, is a 500, and the after hooks of the
// middlewares before it still run, told it panicked: a middleware that took
// something in Before (an idempotency key) must give it back and must not
// store the answer. An After that panicked unrecovered skipped them and
// wedged the key.
func TestChainPanicStillRunsEarlierAfters(t *testing.T) {
	tests := []struct {
		name       string
		panicky    porch.Middleware
		handlerRan bool
	}{
		{"Before panics", panicker{}, false},
		{"After panics", afterPanicker{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := porch.Completion(-1)
			ran := false
			h := porch.Chain(holder{&got}, tc.panicky)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				ran = true
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
			if ran != tc.handlerRan {
				t.Fatalf("handler ran: got %v, want %v", ran, tc.handlerRan)
			}
		})
	}
}
