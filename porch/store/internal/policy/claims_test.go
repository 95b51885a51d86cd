package policy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/policy"
)

// A refused claim is store.ErrPolicyConflict, and its message says what
// clashed: another policy under one name (Claim, ClaimAlone), or, for a
// store whose limiters each count in their own memory (ClaimAlone), a
// second limiter of one name under the same policy, which a message
// saying "another policy" sent its reader looking for a difference that
// was not there.
func TestClaimConflictSaysWhatClashed(t *testing.T) {
	p := driver.Policy{Name: "default", Limit: 5, Window: time.Minute}
	other := p
	other.Limit = 6
	tests := []struct {
		name         string
		claim        func(c *policy.Claims, p driver.Policy) error
		second       driver.Policy
		want, wantNo string
	}{
		{"Claim, another policy", claim, other, "under another policy", "two limiters"},
		{"Claim, the same policy", claim, p, "", ""},
		{"ClaimAlone, another policy", claimAlone, other, "under another policy", "two limiters"},
		{"ClaimAlone, the same policy", claimAlone, p, `two limiters named "default" in one store`, "another policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c policy.Claims
			if err := tt.claim(&c, p); err != nil {
				t.Fatalf("first claim: %v", err)
			}
			err := tt.claim(&c, tt.second)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("second claim: %v, want it shared", err)
				}
				return
			}
			if !errors.Is(err, store.ErrPolicyConflict) {
				t.Fatalf("second claim: %v, want store.ErrPolicyConflict", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, tt.wantNo) {
				t.Errorf("second claim: %q, want it to say %q and not %q", msg, tt.want, tt.wantNo)
			}
		})
	}
}

func claim(c *policy.Claims, p driver.Policy) error {
	_, _, err := c.Claim(p)
	return err
}

func claimAlone(c *policy.Claims, p driver.Policy) error {
	_, err := c.ClaimAlone(p, "on SQLite")
	return err
}
