// Package acceptance is porch's acceptance gate: it builds the storefront
// sample, starts real storefront processes on loopback, and checks the
// contract of issue 2 with real HTTP and by reading the SQLite tables the
// processes leave behind.
//
// Its tests carry the build tag "acceptance", so go test ./... does not run
// them. Run the gate from the repository root:
//
//	./acceptance.sh            # go test -tags acceptance -count=1 -v ./acceptance/
//	./acceptance.sh -run Rate  # extra arguments go to go test
//
// storefront_test.go holds the process helper and the shared HTTP and table
// readers; each *_test.go beside it is one area of the contract.
package acceptance
