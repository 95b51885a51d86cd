package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/writeonce/porch-go/porch"
)

type checkoutRequest struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

// decodeCheckout reads a checkout body, capped by an http.MaxBytesReader:
// one JSON object of the known fields and nothing after it but whitespace.
// It returns the problem to answer when the body is refused: 413 when the
// cap was reached, 400 otherwise.
//
// The rest of the body is read to its end rather than peeked at with
// Decoder.More, which reports false on a stray "]" or "}" and on a read
// error, so trailing garbage and a body of any size (the object, then
// spaces) were accepted.
func decodeCheckout(body io.Reader) (checkoutRequest, *porch.Problem) {
	var req checkoutRequest
	rd := &bodyReader{r: body}
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, rd.problem("the body must be a JSON object {\"sku\": string, \"qty\": int}: " + err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, rd.problem("the body must hold one JSON object and nothing after it")
	}
	if req.SKU == "" || req.Qty < 1 || req.Qty > 1000 {
		return req, badRequest("invalid-order", "sku is required and qty must be between 1 and 1000")
	}
	return req, nil
}

// bodyReader is a body that remembers what reading it failed with, so
// that a refusal tells a failed read from a body that is not what the
// handler takes: a decoder returns both alike.
type bodyReader struct {
	r   io.Reader
	err error // the read's error, io.EOF aside
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// broken reports whether the connection failed while the body was read
// (any read error but the cap's): the request is over.
func (b *bodyReader) broken() bool {
	return b.err != nil && !errors.As(b.err, new(*http.MaxBytesError))
}

// problem is the answer to a refused body: porch.BodyProblem's when
// reading it failed (413 past the cap, 408 past the server's read timeout,
// else 400, never with the error's text, which names the server's socket
// addresses), else a 400 malformed-body saying detail.
func (b *bodyReader) problem(detail string) *porch.Problem {
	if b.err != nil {
		p := porch.BodyProblem(problemBase, b.err)
		return &p
	}
	return badRequest("malformed-body", detail)
}

func badRequest(typ, detail string) *porch.Problem {
	return &porch.Problem{Type: problemBase + typ, Title: "Bad Request", Status: http.StatusBadRequest, Detail: detail}
}
