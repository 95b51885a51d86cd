package idem

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// defaultKeyHeader is the request header that carries the key
// (draft-ietf-httpapi-idempotency-key-header); Options.KeyHeader renames it.
const defaultKeyHeader = "Idempotency-Key"

// defaultReplayedHeader marks a response served from the store rather than
// by the handler, with the value "true"; Options.ReplayedHeader renames it.
const defaultReplayedHeader = "Idempotency-Replayed"

// neverKept are the response headers KeepHeaders may not name, and why:
// replaying them would be wrong, whatever the handler meant.
var neverKept = map[string]string{
	"Set-Cookie": "a session or CSRF cookie issued once would be issued again to every retry for the TTL, " +
		"after it may have been rotated or revoked",
	"Date":                  "it would be stale; net/http sets it afresh",
	"Content-Length":        "net/http and porch set it from the body",
	"Transfer-Encoding":     "it describes the original connection's framing",
	"Connection":            "it describes the original connection",
	"Keep-Alive":            "it describes the original connection",
	"Proxy-Connection":      "it describes the original connection",
	"Upgrade":               "it describes the original connection",
	"Trailer":               "porch buffers responses and sends no trailers",
	"Retry-After":           "it was true when it was sent, not when the retry arrives",
	defaultReplayedHeader:   "porch sets it on every replay",
	"Ratelimit":             "the rate limiter sets it for the retry",
	"Ratelimit-Policy":      "the rate limiter sets it for the retry",
	"X-Ratelimit-Limit":     "the rate limiter sets it for the retry",
	"X-Ratelimit-Remaining": "the rate limiter sets it for the retry",
	"X-Ratelimit-Reset":     "the rate limiter sets it for the retry",
}

// keepHeaders resolves Options.KeepHeaders: canonical names, without
// Content-Type (always kept) and repeats. It panics on a name that is not a
// field name or is never kept, replayed (the replay marker) among them.
func keepHeaders(names []string, replayed string) []string {
	var keep []string
	for _, name := range names {
		if !validFieldName(name) {
			panic(fmt.Sprintf("idem: New expects KeepHeaders to be field names, got %q", name))
		}
		name = http.CanonicalHeaderKey(name)
		if why, ok := neverKept[name]; ok {
			panic(fmt.Sprintf("idem: KeepHeaders may not name %s: %s", name, why))
		}
		if name == replayed {
			panic(fmt.Sprintf("idem: KeepHeaders may not name %s: %s", name, neverKept[defaultReplayedHeader]))
		}
		if name != "Content-Type" && !slices.Contains(keep, name) {
			keep = append(keep, name)
		}
	}
	return keep
}

// validFieldName reports whether name is an RFC 9110 token, which is what
// a field name is.
func validFieldName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return name != ""
}

// headerNames resolves Options.KeyHeader and ReplayedHeader to canonical
// names, defaults for empty ones. It panics on a name that is not a field
// name, and on a replay marker whose value porch or net/http sets, or a
// replay must not.
func headerNames(key, replayed string) (string, string) {
	if key == "" {
		key = defaultKeyHeader
	}
	if replayed == "" {
		replayed = defaultReplayedHeader
	}
	if !validFieldName(key) {
		panic(fmt.Sprintf("idem: New expects KeyHeader to be a field name, got %q", key))
	}
	if !validFieldName(replayed) {
		panic(fmt.Sprintf("idem: New expects ReplayedHeader to be a field name, got %q", replayed))
	}
	replayed = http.CanonicalHeaderKey(replayed)
	if why, ok := neverKept[replayed]; (ok && replayed != defaultReplayedHeader) || replayed == "Content-Type" {
		if !ok {
			why = "it is the stored response's"
		}
		panic(fmt.Sprintf("idem: ReplayedHeader may not be %s: %s", replayed, why))
	}
	return http.CanonicalHeaderKey(key), replayed
}

// kept copies the headers of h that keep names, for the stored row: the
// response's own map may still be changed by the middlewares whose After
// runs later.
func kept(h http.Header, keep []string) http.Header {
	var out http.Header
	for _, name := range keep {
		if vals := h[name]; len(vals) > 0 {
			if out == nil {
				out = make(http.Header, len(keep))
			}
			out[name] = slices.Clone(vals)
		}
	}
	return out
}
