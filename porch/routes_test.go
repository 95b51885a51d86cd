package porch_test

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/writeonce/porch-go/porch"
)

// An App answers what it does not route with problem+json, and serves HEAD
// wherever it serves GET.
func TestAppRoutesUnroutedAndHead(t *testing.T) {
	app := porch.New()
	app.Get("/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	app.Post("/orders", func(w http.ResponseWriter, r *http.Request) {})
	app.Route("/admin", func(r chi.Router) {
		r.Get("/stats", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	})
	srv := httptest.NewServer(app)
	defer srv.Close()

	tests := []struct {
		name         string
		method, path string
		status       int
		allow        string // the Allow header wanted; "" for none
		problem      bool   // a problem+json body
		body         string // the body wanted when not a problem
	}{
		{name: "GET routed", method: "GET", path: "/ping", status: 200, body: "pong"},
		{name: "HEAD on a GET route", method: "HEAD", path: "/ping", status: 200, body: ""},
		{name: "HEAD on a mounted GET route", method: "HEAD", path: "/admin/stats", status: 200, body: ""},
		{name: "no route", method: "GET", path: "/nope", status: 404, problem: true},
		{name: "no route under a mount", method: "GET", path: "/admin/nope", status: 404, problem: true},
		{name: "method not served", method: "DELETE", path: "/ping", status: 405, allow: "GET, HEAD", problem: true},
		{name: "HEAD where only POST is served", method: "HEAD", path: "/orders", status: 405, allow: "POST"},
		{name: "method not served under a mount", method: "PUT", path: "/admin/stats", status: 405, allow: "GET, HEAD", problem: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.status {
				t.Fatalf("got %d %s, want %d", res.StatusCode, body, tt.status)
			}
			if got := res.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow: got %q, want %q", got, tt.allow)
			}
			if !tt.problem {
				if tt.method != http.MethodHead && string(body) != tt.body {
					t.Errorf("body: got %q, want %q", body, tt.body)
				}
				if tt.method == http.MethodHead && len(body) != 0 {
					t.Errorf("HEAD body: got %q, want none", body)
				}
				return
			}
			if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != porch.ProblemContentType {
				t.Errorf("Content-Type: got %q, want %s", res.Header.Get("Content-Type"), porch.ProblemContentType)
			}
			var p porch.Problem
			if err := json.Unmarshal(body, &p); err != nil || p.Type == "" || p.Status != tt.status {
				t.Errorf("problem body: got %+v (%v) from %s, want a type and status %d", p, err, body, tt.status)
			}
		})
	}
}
