package porch

import (
	"encoding/json"
	"net/http"
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
