package porch

import (
	"net/http"
	"strconv"
)

// Response is a buffered HTTP response: what a handler wrote, or what a
// before hook answers in its place. After hooks may change it before it is
// written to the client.
//
// The zero value is an empty 200 response with no header.
type Response struct {
	Status int         // if zero, 200
	Header http.Header // may be nil
	Body   []byte
}

// StatusCode reports the status, 200 when unset.
func (r *Response) StatusCode() int {
	if r.Status == 0 {
		return http.StatusOK
	}
	return r.Status
}

// SetHeader sets a header field, allocating the header map when nil.
func (r *Response) SetHeader(key, value string) {
	if r.Header == nil {
		r.Header = make(http.Header)
	}
	r.Header.Set(key, value)
}

// Write sends the response to w. Content-Length is always set from the body,
// so a replayed response is byte-identical to the original.
func (r *Response) Write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range r.Header {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(len(r.Body)))
	w.WriteHeader(r.StatusCode())
	w.Write(r.Body) //nolint:errcheck // the client went away; nothing to do
}

// bufferWriter is the http.ResponseWriter a handler writes into under Chain.
type bufferWriter struct {
	res         *Response
	wroteHeader bool
}

func newBufferWriter() *bufferWriter {
	return &bufferWriter{res: &Response{Header: make(http.Header)}}
}

func (b *bufferWriter) Header() http.Header { return b.res.Header }

// WriteHeader records the final status. An interim 1xx (103 Early Hints)
// is dropped: a buffered response cannot send one ahead, and recorded as
// the status it would hide the real one (a failed login counted as a 103
// would be given back; an idempotent 201 would be stored as 103). Its
// headers stay in Header and go out with the final response. 101 is final.
func (b *bufferWriter) WriteHeader(status int) {
	if b.wroteHeader || (status >= 100 && status < 200 && status != http.StatusSwitchingProtocols) {
		return
	}
	b.wroteHeader = true
	b.res.Status = status
}

func (b *bufferWriter) Write(p []byte) (int, error) {
	if !b.wroteHeader {
		b.WriteHeader(http.StatusOK)
	}
	b.res.Body = append(b.res.Body, p...)
	return len(p), nil
}
