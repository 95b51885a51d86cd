package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A statement the database refused for what it says is the owner's fault
// (500, nothing stored); one that failed because the session, the server or
// a lock did is not (503, retry).
func TestOwnersFault(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"unique violation", &pgconn.PgError{Severity: "ERROR", Code: "23505"}, true},
		{"syntax error", &pgconn.PgError{Severity: "ERROR", Code: "42601"}, true},
		{"raised by a trigger", &pgconn.PgError{Severity: "ERROR", Code: "P0001"}, true},
		{"idle in transaction timeout", &pgconn.PgError{Severity: "FATAL", Code: "25P03"}, false},
		{"terminated", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, false},
		{"lock timeout", &pgconn.PgError{Severity: "ERROR", Code: "55P03"}, false},
		{"serialization failure", &pgconn.PgError{Severity: "ERROR", Code: "40001"}, false},
		{"in failed transaction", &pgconn.PgError{Severity: "ERROR", Code: "25P02"}, false},
		{"not a server error", errors.New("conn closed"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ownersFault(context.Background(), tc.err); got != tc.want {
				t.Errorf("ownersFault(%v): got %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
