package main

import (
	"encoding/json"
	"errors"
	"fmt"
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
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, bodyProblem(err, "the body must be a JSON object {\"sku\": string, \"qty\": int}: "+err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, bodyProblem(err, "the body must hold one JSON object and nothing after it")
	}
	if req.SKU == "" || req.Qty < 1 || req.Qty > 1000 {
		return req, badRequest("invalid-order", "sku is required and qty must be between 1 and 1000")
	}
	return req, nil
}

// bodyProblem is 413 when err is the body's cap, else a 400 saying detail.
func bodyProblem(err error, detail string) *porch.Problem {
	if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
		return &porch.Problem{Type: problemBase + "body-too-large", Title: "Content Too Large",
			Status: http.StatusRequestEntityTooLarge, Detail: fmt.Sprintf("the body may be at most %d bytes", tooLarge.Limit)}
	}
	return badRequest("malformed-body", detail)
}

func badRequest(typ, detail string) *porch.Problem {
	return &porch.Problem{Type: problemBase + typ, Title: "Bad Request", Status: http.StatusBadRequest, Detail: detail}
}
