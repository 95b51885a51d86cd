package idem

import (
	"net/http"

	"github.com/writeonce/porch-go/porch"
)

// observe tells Options.Observer the outcome of r. Every keyed request
// gets exactly one, from Before's path; a response After withholds (a
// failed save) keeps the outcome it was given.
func (m *Keys) observe(r *http.Request, o porch.IdemOutcome) {
	if m.opt.Observer != nil {
		m.opt.Observer.IdemOutcome(r.Context(), o)
	}
}
