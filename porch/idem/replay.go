package idem

import (
	"net/http"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// answer is what a request gets once its key has a stored response: a
// replay when it is the same request, and 422 when the key was reused for a
// different one. Nothing is run and nothing is overwritten.
func (m *Keys) answer(r *http.Request, row driver.Response, digest []byte) *porch.Response {
	if !sameRequest(row.Digest, digest) {
		m.observe(r, Mismatch)
		return m.reused("this key was used for a request with a different method, path or body", row.Digest, digest)
	}
	m.observe(r, Replayed)
	return replay(row, m.keep, m.replayedHeader)
}

// replay renders a stored response: its status, body, content type and the
// stored headers keep still names. Other headers (Set-Cookie, Date) would
// be wrong to repeat, and are not stored.
func replay(s driver.Response, keep []string, marker string) *porch.Response {
	res := &porch.Response{Status: s.Status, Header: kept(s.Header, keep), Body: s.Body}
	if res.Header == nil {
		res.Header = make(http.Header)
	}
	if s.ContentType != "" {
		res.Header.Set("Content-Type", s.ContentType)
	}
	res.Header.Set(marker, "true")
	return res
}

// reused is the 422 for a key reused for another request, whose digest is
// other. When the two bodies differ only in how their JSON is written, the
// detail says so, and names the option that treats them as one request.
func (m *Keys) reused(detail string, other, digest []byte) *porch.Response {
	if sameJSON(other, digest) {
		detail += "; the two bodies differ only in how their JSON is written (member order, whitespace, " +
			"escapes or number forms): with idem.Options.Fingerprint set to idem.FingerprintJSON the server " +
			"would take them as one request and replay its answer"
	}
	return m.problem(problemKeyReused, http.StatusUnprocessableEntity, m.keyHeader+" reused", detail)
}
