package porch

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// The methods probed for a 405's Allow header: chi's standard set. A method
// added with chi.RegisterMethod is served but not listed.
var allowProbe = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace,
}

// notFound answers a path no route serves. chi's default is a plain-text
// 404, which a client of a problem+json API would have to special-case.
func notFound(w http.ResponseWriter, r *http.Request) {
	Problem{
		Type:   "about:blank",
		Title:  "Not Found",
		Status: http.StatusNotFound,
		Detail: "no route serves " + r.URL.Path,
	}.Write(w)
}

// methodNotAllowed answers a method the path's routes do not serve, with
// the Allow header RFC 9110 requires. chi hands its list of allowed methods
// only to its own empty-bodied handler, so the list is found again by
// asking the router which methods match the path.
func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	allowed := strings.Join(allowedMethods(r), ", ")
	detail := r.Method + " is not served on " + r.URL.Path
	if allowed != "" {
		detail += "; allowed: " + allowed
	}
	res := Problem{
		Type:   "about:blank",
		Title:  "Method Not Allowed",
		Status: http.StatusMethodNotAllowed,
		Detail: detail,
	}.Response()
	if allowed != "" {
		res.SetHeader("Allow", allowed)
	}
	res.Write(w)
}

// allowedMethods lists the methods the router serves on r's path. HEAD is
// listed wherever GET is, since New routes HEAD to GET handlers.
func allowedMethods(r *http.Request) []string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return nil
	}
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allowed []string
	get := false
	for _, m := range allowProbe {
		if m == http.MethodHead && get {
			allowed = append(allowed, m)
			continue
		}
		if rctx.Routes.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
			get = get || m == http.MethodGet
		}
	}
	return allowed
}
