package porch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/writeonce/porch-go/porch/internal/problemtype"
)

// ProblemContentType is the media type of RFC 9457 problem details.
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem detail. Type is a stable URI reference that
// clients may switch on; Title is fixed per Type; Detail varies.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Response renders p as an application/problem+json response.
func (p Problem) Response() *Response {
	body, err := json.Marshal(p)
	if err != nil { // a struct of strings and an int always marshals
		panic("porch: marshal problem: " + err.Error())
	}
	res := &Response{Status: p.Status, Body: append(body, '\n')}
	res.SetHeader("Content-Type", ProblemContentType)
	return res
}

// Write sends p to w.
func (p Problem) Write(w http.ResponseWriter) { p.Response().Write(w) }

// Unavailable is the fail-closed answer shared by every store-backed
// middleware: 503 with a Retry-After hint. typ names the cause.
func Unavailable(typ, detail string, retryAfter time.Duration) *Response {
	res := Problem{Type: typ, Title: "Service Unavailable", Status: http.StatusServiceUnavailable, Detail: detail}.Response()
	res.SetHeader("Retry-After", strconv.Itoa(problemtype.RetryAfter(retryAfter)))
	return res
}

// BodyProblem is the answer to a request whose body could not be read:
// err is what reading r.Body failed with, and base starts the problem's
// type (an application's, or "https://porch.dev/problems/" and a
// middleware's prefix). It is
//
//   - 408 Request Timeout, base+"body-timeout", when the body did not
//     arrive within the server's ReadTimeout (the read failed with
//     os.ErrDeadlineExceeded);
//   - 413 Content Too Large, base+"body-too-large", past an
//     http.MaxBytesReader's limit;
//   - 400 Bad Request, base+"body-unreadable", otherwise (the client
//     closed the connection, or sent less than its Content-Length).
//
// Its detail is plain, never err's text: a failed read says "read tcp
// 127.0.0.1:8080->203.0.113.7:51234: i/o timeout", the server's own
// addresses, which are no client's business. Log err if it matters.
func BodyProblem(base string, err error) Problem {
	if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
		return Problem{Type: base + "body-too-large", Title: "Content Too Large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("the body may be at most %d bytes", tooLarge.Limit)}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return Problem{Type: base + "body-timeout", Title: "Request Timeout", Status: http.StatusRequestTimeout,
			Detail: "the request body did not arrive within the server's read timeout"}
	}
	detail := "the request body could not be read"
	if errors.Is(err, io.ErrUnexpectedEOF) {
		detail = "the request body ended before its declared length"
	}
	return Problem{Type: base + "body-unreadable", Title: "Bad Request", Status: http.StatusBadRequest, Detail: detail}
}
