package porch_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch"
)

// traceKey marks a request as having passed a named middleware's Before.
type traceKey string

// tracer is a Middleware that logs its hooks into a shared trace. Every
// request in these tests runs on one goroutine, so the trace needs no lock.
type tracer struct {
	name  string
	trace *[]string
	short *porch.Response // if set, Before short-circuits with it
}

func (m *tracer) Before(r *http.Request) (*http.Request, *porch.Response) {
	*m.trace = append(*m.trace, "before "+m.name)
	return r.WithContext(context.WithValue(r.Context(), traceKey(m.name), true)), m.short
}

func (m *tracer) After(r *http.Request, res *porch.Response, c porch.Completion) {
	entry := "after " + m.name + " " + strconv.Itoa(res.StatusCode())
	if c == porch.Panicked {
		entry += " panicked"
	}
	if r.Context().Value(traceKey(m.name)) == nil {
		entry += " without its own request"
	}
	*m.trace = append(*m.trace, entry)
}

func TestChain(t *testing.T) {
	tests := []struct {
		name       string
		shortAt    int // index of the middleware that short-circuits; -1 for none
		handler    func(trace *[]string) http.HandlerFunc
		wantTrace  []string
		wantStatus int
		wantBody   string
	}{
		{
			name:    "befores in order, handler, afters in reverse",
			shortAt: -1,
			handler: func(trace *[]string) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					for _, n := range []string{"a", "b", "c"} {
						if r.Context().Value(traceKey(n)) == nil {
							*trace = append(*trace, "handler missing "+n)
						}
					}
					*trace = append(*trace, "handler")
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, "made")
				}
			},
			wantTrace: []string{
				"before a", "before b", "before c", "handler",
				"after c 201", "after b 201", "after a 201",
			},
			wantStatus: http.StatusCreated,
			wantBody:   "made",
		},
		{
			name:    "short-circuit stops later befores and the handler",
			shortAt: 1,
			handler: handlerThatLogs,
			wantTrace: []string{
				"before a", "before b",
				"after b 418", "after a 418",
			},
			wantStatus: http.StatusTeapot,
			wantBody:   "short",
		},
		{
			name:       "short-circuit by the first middleware",
			shortAt:    0,
			handler:    handlerThatLogs,
			wantTrace:  []string{"before a", "after a 418"},
			wantStatus: http.StatusTeapot,
			wantBody:   "short",
		},
		{
			name:    "handler panic becomes 500 and afters see panicked",
			shortAt: -1,
			handler: func(trace *[]string) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					*trace = append(*trace, "handler")
					io.WriteString(w, "half a response")
					panic("boom")
				}
			},
			wantTrace: []string{
				"before a", "before b", "before c", "handler",
				"after c 500 panicked", "after b 500 panicked", "after a 500 panicked",
			},
			wantStatus: http.StatusInternalServerError,
		},
		{
			name:    "http.ErrAbortHandler is a panic too",
			shortAt: -1,
			handler: func(trace *[]string) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					*trace = append(*trace, "handler")
					panic(http.ErrAbortHandler)
				}
			},
			wantTrace: []string{
				"before a", "before b", "before c", "handler",
				"after c 500 panicked", "after b 500 panicked", "after a 500 panicked",
			},
			wantStatus: http.StatusInternalServerError,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var trace []string
			var ms []porch.Middleware
			for i, n := range []string{"a", "b", "c"} {
				m := &tracer{name: n, trace: &trace}
				if i == tt.shortAt {
					m.short = &porch.Response{Status: http.StatusTeapot, Body: []byte("short")}
				}
				ms = append(ms, m)
			}
			h := porch.Chain(ms...)(tt.handler(&trace))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))

			if !slices.Equal(trace, tt.wantTrace) {
				t.Errorf("got trace\n\t%q\nwant\n\t%q", trace, tt.wantTrace)
			}
			if rec.Code != tt.wantStatus {
				t.Errorf("got status %d, want %d", rec.Code, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusInternalServerError {
				if got := rec.Header().Get("Content-Type"); got != porch.ProblemContentType {
					t.Errorf("got Content-Type %q, want %q", got, porch.ProblemContentType)
				}
				return
			}
			if got := rec.Body.String(); got != tt.wantBody {
				t.Errorf("got body %q, want %q", got, tt.wantBody)
			}
		})
	}
}

func handlerThatLogs(trace *[]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		*trace = append(*trace, "handler")
	}
}

// rewriter is an after hook that replaces the response it is given.
type rewriter struct{ sawStatus, sawBody *string }

func (rewriter) Before(r *http.Request) (*http.Request, *porch.Response) { return r, nil }

func (m rewriter) After(r *http.Request, res *porch.Response, _ porch.Completion) {
	*m.sawStatus = strconv.Itoa(res.StatusCode())
	*m.sawBody = string(res.Body)
	res.Status = http.StatusAccepted
	res.SetHeader("X-After", "yes")
	res.Body = append(res.Body, " (rewritten)"...)
}

func TestChainAfterCanChangeResponse(t *testing.T) {
	var sawStatus, sawBody string
	h := porch.Chain(rewriter{&sawStatus, &sawBody})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Handler", "yes")
		io.WriteString(w, "original")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))

	if sawStatus != "200" || sawBody != "original" {
		t.Errorf("after saw %s %q, want 200 %q", sawStatus, sawBody, "original")
	}
	if rec.Code != http.StatusAccepted {
		t.Errorf("got status %d, want %d", rec.Code, http.StatusAccepted)
	}
	for _, h := range []string{"X-After", "X-Handler"} {
		if got := rec.Header().Get(h); got != "yes" {
			t.Errorf("got %s %q, want %q", h, got, "yes")
		}
	}
	const want = "original (rewritten)"
	if got := rec.Body.String(); got != want {
		t.Errorf("got body %q, want %q", got, want)
	}
	if got := rec.Header().Get("Content-Length"); got != strconv.Itoa(len(want)) {
		t.Errorf("got Content-Length %q, want %d", got, len(want))
	}
}

func TestChainBuffersHandlerOutput(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int
		wantBody   string
	}{
		{
			name:       "nothing written is an empty 200",
			handler:    func(w http.ResponseWriter, r *http.Request) {},
			wantStatus: http.StatusOK,
		},
		{
			name:       "write without WriteHeader is 200",
			handler:    func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "x") },
			wantStatus: http.StatusOK,
			wantBody:   "x",
		},
		{
			name: "the first WriteHeader wins",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				w.WriteHeader(http.StatusConflict)
				io.WriteString(w, "a")
				io.WriteString(w, "b")
			},
			wantStatus: http.StatusCreated,
			wantBody:   "ab",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			porch.Chain()(tt.handler).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != tt.wantStatus {
				t.Errorf("got status %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := rec.Body.String(); got != tt.wantBody {
				t.Errorf("got body %q, want %q", got, tt.wantBody)
			}
			if got, want := rec.Header().Get("Content-Length"), strconv.Itoa(len(tt.wantBody)); got != want {
				t.Errorf("got Content-Length %q, want %q", got, want)
			}
		})
	}
}

// headerMiddleware short-circuits requests to /blocked and stamps every
// response it sees in After.
type headerMiddleware struct{}

func (headerMiddleware) Before(r *http.Request) (*http.Request, *porch.Response) {
	if r.URL.Path == "/blocked" {
		return r, &porch.Response{Status: http.StatusForbidden, Body: []byte("blocked")}
	}
	return r, nil
}

func (headerMiddleware) After(r *http.Request, res *porch.Response, _ porch.Completion) {
	res.SetHeader("X-Porch", "after")
}

func TestChainOfOneIsChiMiddleware(t *testing.T) {
	r := chi.NewRouter()
	r.Use(porch.Chain(headerMiddleware{}))
	r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "item "+chi.URLParam(r, "id"))
	})
	r.Get("/blocked", func(w http.ResponseWriter, r *http.Request) {
		t.Error("handler behind a short-circuit ran")
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	tests := []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/items/7", http.StatusOK, "item 7"},
		{"/blocked", http.StatusForbidden, "blocked"},
		{"/nowhere", http.StatusNotFound, "404 page not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res, err := srv.Client().Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tt.wantStatus {
				t.Errorf("got status %d, want %d", res.StatusCode, tt.wantStatus)
			}
			if string(body) != tt.wantBody {
				t.Errorf("got body %q, want %q", body, tt.wantBody)
			}
			if got := res.Header.Get("X-Porch"); got != "after" {
				t.Errorf("got X-Porch %q, want %q", got, "after")
			}
		})
	}
}
