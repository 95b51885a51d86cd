package idem

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/canonjson"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
)

// digest reads the body (restoring it for the handler) and hashes method,
// path with query, and the body's fingerprint. Without Options.Fingerprint,
// a JSON body's digest carries a second hash, of its canonical form (see
// jsonHint).
func (m *Keys) digest(r *http.Request) ([]byte, *porch.Response) {
	body, err := m.readBody(r)
	if err != nil {
		// idempotency-body-timeout, -too-large or -unreadable, with a
		// detail that does not carry the server's socket addresses.
		p := porch.BodyProblem(problemtype.Default+"idempotency-", err)
		p.Type = m.problemType(p.Type)
		return nil, p.Response()
	}
	if int64(len(body)) > m.opt.MaxBody {
		return nil, m.problem(problemBodyTooLarge, http.StatusRequestEntityTooLarge, "Content Too Large",
			fmt.Sprintf("an idempotent request body may be at most %d bytes", m.opt.MaxBody))
	}
	if m.opt.Fingerprint == nil {
		return withJSONForm(requestDigest(r.Method, r.URL.RequestURI(), body), r.Method, r.URL.RequestURI(), body), nil
	}
	fp, err := m.opt.Fingerprint(body)
	if err != nil {
		return nil, m.problem(problemBodyInvalid, http.StatusBadRequest, "Invalid body", err.Error())
	}
	return requestDigest(r.Method, r.URL.RequestURI(), fp), nil
}

// A request's digest is the SHA-256 that requestDigest makes: two requests
// are the same request exactly when its first digestSize bytes are equal.
// Without Options.Fingerprint, the digest of a JSON body of at most
// jsonHintMaxBody bytes is followed by a second SHA-256, of the same
// framing with the body's canonical form (FingerprintJSON's). It decides
// nothing: when a key is reused with a body that differs only in how its
// JSON is written (member order, whitespace, escapes, 1.0 for 1), it lets
// the 422 say that FingerprintJSON would have replayed it, which is what
// such a client's developer needs to hear. A digest without the second
// hash compares by its first digestSize bytes all the same.
//
// The hint is capped at 4 KiB because it is paid on every keyed request,
// not only on the rare 422 it serves: canonicalising a body of small
// objects costs several times hashing it, in time and allocations
// (BenchmarkKeyedJSONBody), a cost any client past the rate limiter could
// impose on every request. Typical API bodies are far smaller; past the
// cap, the 422 says only that the bodies differ.
const (
	digestSize      = sha256.Size
	jsonHintMaxBody = 4 << 10
)

// withJSONForm appends to d the digest of body's canonical JSON form, when
// body is a JSON object or array of at most jsonHintMaxBody bytes.
func withJSONForm(d []byte, method, uri string, body []byte) []byte {
	if len(body) > jsonHintMaxBody {
		return d
	}
	if v := bytes.TrimLeft(body, " \t\n\r"); len(v) == 0 || (v[0] != '{' && v[0] != '[') {
		return d
	}
	c, err := canonjson.Form(body)
	if err != nil {
		return d
	}
	return append(d, requestDigest(method, uri, c)...)
}

// sameRequest reports whether digests a and b are of the same request.
func sameRequest(a, b []byte) bool {
	return bytes.Equal(a[:min(len(a), digestSize)], b[:min(len(b), digestSize)])
}

// sameJSON reports whether digests a and b, of different requests, are of
// bodies that differ only in how their JSON is written.
func sameJSON(a, b []byte) bool {
	return len(a) == 2*digestSize && len(b) == 2*digestSize && bytes.Equal(a[digestSize:], b[digestSize:])
}

// readBody reads r's body, up to one byte past MaxBody, and hands the
// handler a reader of what was read. A request without a body (net/http's
// NoBody: a POST with no Content-Length, or 0) is left as it is, so that
// such a keyed request allocates nothing for a body it does not have.
func (m *Keys) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.opt.MaxBody+1))
	if err != nil {
		return nil, err
	}
	rb := new(readBody)
	rb.Reset(body)
	r.Body = rb
	return body, nil
}

// readBody is a body read whole, handed back to the handler: one allocation
// where io.NopCloser(bytes.NewReader(body)) would make two.
type readBody struct{ bytes.Reader }

func (*readBody) Close() error { return nil }

// digestInline is the longest framing hashed in one call on the stack.
const digestInline = 512

// requestDigest is SHA-256 of method, NUL, request-URI, NUL, fingerprint:
// the framing FuzzDigest checks. A framing that fits digestInline bytes is
// hashed from a buffer on the stack, which allocates only the digest (a
// streaming hash would allocate it, the hash and a copy of the method).
func requestDigest(method, uri string, fp []byte) []byte {
	var sum [sha256.Size]byte
	if n := len(method) + len(uri) + len(fp) + 2; n <= digestInline {
		var buf [digestInline]byte
		b := append(buf[:0], method...)
		b = append(b, 0)
		b = append(b, uri...)
		b = append(b, 0)
		b = append(b, fp...)
		sum = sha256.Sum256(b)
	} else {
		h := sha256.New()
		io.WriteString(h, method)
		h.Write([]byte{0})
		io.WriteString(h, uri)
		h.Write([]byte{0})
		h.Write(fp)
		h.Sum(sum[:0])
	}
	return append([]byte(nil), sum[:]...)
}
