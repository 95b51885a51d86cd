package porch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
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
	res.SetHeader("Retry-After", strconv.Itoa(RetryAfterSeconds(retryAfter)))
	return res
}

// FailClosed is the answer of a store-backed middleware that could not do
// its work for r: 503 with Retry-After, never a pass. typ is the
// middleware's problem type and what names its work for the detail ("count
// this request"). A saturated pool and a request that ended are expected
// under load and go unlogged; any other error means the store failed, and is
// logged through [LogError], so a store that fails every request does not
// flood the log.
func FailClosed(r *http.Request, typ, what string, err error) *Response {
	return errorLog.FailClosed(r, typ, what, err)
}

// FailClosed is [FailClosed] logging through l instead of the process's
// ErrorLog: for a middleware given its own logger.
func (l *ErrorLog) FailClosed(r *http.Request, typ, what string, err error) *Response {
	var detail string
	switch {
	case errors.Is(err, ErrSaturated):
		detail = "the actor pool is saturated; could not " + what
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		detail = "the request ended before porch could " + what
	default:
		detail = "the store failed; could not " + what
		l.Error(r.Context(), "porch: could not "+what, "err", err)
	}
	return Unavailable(typ, detail, time.Second)
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1, as the
// Retry-After header wants.
func RetryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}
