package porch_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch"
)

// errorPage is a PanicResponse that asks for another status, which the
// chain must not grant.
func errorPage(r *http.Request) *porch.Response {
	return &porch.Response{
		Status: http.StatusServiceUnavailable,
		Header: http.Header{"Content-Type": {"text/html"}},
		Body:   []byte("<p>Sorry: " + r.URL.Path + "</p>"),
	}
}

func TestPanicResponse(t *testing.T) {
	panics := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	tests := []struct {
		name     string
		respond  func(*http.Request) *porch.Response
		panicky  porch.Middleware // if nil, the handler panics
		wantType string           // Content-Type
		wantBody string           // a part of it
	}{
		{"zero value: the default problem", nil, nil, porch.ProblemContentType, `"type":"about:blank"`},
		{"the handler panics: the page, status 500", errorPage, nil, "text/html", "<p>Sorry: /x</p>"},
		{"a Before panics: the page", errorPage, panicker{}, "text/html", "<p>Sorry: /x</p>"},
		{"an After panics: the page", errorPage, afterPanicker{}, "text/html", "<p>Sorry: /x</p>"},
		{"nil: the default", func(*http.Request) *porch.Response { return nil }, nil,
			porch.ProblemContentType, `"type":"about:blank"`},
		{"it panics: the default", func(*http.Request) *porch.Response { panic("page broke") }, nil,
			porch.ProblemContentType, `"type":"about:blank"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := porch.Completion(-1)
			ms := []porch.Middleware{holder{&got}}
			var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
			if tc.panicky != nil {
				ms = append(ms, tc.panicky)
			} else {
				h = panics
			}
			chain := porch.ChainOptions{PanicResponse: tc.respond}.Chain(ms...)(h)
			rec := httptest.NewRecorder()
			chain.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x", nil))
			if rec.Code != http.StatusInternalServerError {
				t.Errorf("status: got %d, want 500", rec.Code)
			}
			if ct := rec.Header().Get("Content-Type"); ct != tc.wantType || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("got %q %q, want %q with %q", ct, rec.Body, tc.wantType, tc.wantBody)
			}
			if got != porch.Panicked {
				t.Errorf("the earlier middleware's After: got %v, want %v", got, porch.Panicked)
			}
		})
	}
}

// A handler that does not panic never meets PanicResponse.
func TestPanicResponseOnlyOnPanic(t *testing.T) {
	called := false
	o := porch.ChainOptions{PanicResponse: func(*http.Request) *porch.Response { called = true; return nil }}
	h := o.Chain()(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError) // an answer, not a panic
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusInternalServerError || called {
		t.Errorf("got %d, PanicResponse called %v; want 500 and not called", rec.Code, called)
	}
}

func ExampleChainOptions() {
	chain := porch.ChainOptions{
		PanicResponse: func(r *http.Request) *porch.Response {
			return &porch.Response{ // the status is always 500
				Header: http.Header{"Content-Type": {"text/plain"}},
				Body:   []byte("Something broke on our side; the order was not placed.\n"),
			}
		},
	}.Chain()
	h := chain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic("nil map") // logged with its stack, never sent
	}))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders", nil))
	fmt.Print(rec.Code, " ", rec.Body)
	// Output:
	// 500 Something broke on our side; the order was not placed.
}
