package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// Policy claims across instances: each limiter name has a hash in Redis
// (policyKey) with a field per instance that counts under it, holding the
// instance's policy and a deadline on the server's clock. Every instance
// renews its fields every heartbeatEvery, to claimTTL from then; a claim
// (luaClaim) drops dead fields and is refused while a live one holds
// another policy. An instance that stops without Close stops renewing, so
// its claims die within claimTTL and never block a deploy for longer.
const (
	heartbeatEvery = time.Second
	claimTTL       = 5 * time.Second
)

// policyKey is name's claims hash.
func (s *Store) policyKey(name string) string {
	return s.opt.Prefix + "{" + hashTag("policy:"+name) + "}policy:" + name
}

// encodePolicy is p as a claim field stores it.
func encodePolicy(p driver.Policy) string {
	alg := p.Algorithm
	if alg == "" {
		alg = "fixed"
	}
	return fmt.Sprintf("%s %d %d %d", alg, p.Limit, int64(p.Window), p.Burst)
}

// decodePolicy reads encodePolicy's form back, for messages.
func decodePolicy(name, v string) string {
	f := strings.Fields(v)
	if len(f) != 4 {
		return strconv.Quote(v)
	}
	limit, _ := strconv.ParseInt(f[1], 10, 64)
	window, _ := strconv.ParseInt(f[2], 10, 64)
	burst, _ := strconv.ParseInt(f[3], 10, 64)
	return driver.Policy{Name: name, Limit: limit, Window: time.Duration(window), Algorithm: f[0], Burst: burst}.String()
}

// checkPolicy fails for a policy the scripts cannot count.
func checkPolicy(p driver.Policy) error {
	alg := p.Algorithm
	if alg == "" {
		alg = "fixed"
	}
	if hitScripts[alg] == nil {
		return fmt.Errorf("redis: %w: %q", driver.ErrAlgorithm, alg)
	}
	most := p.Limit
	if p.Burst > 0 {
		most = p.Burst
	}
	if most < 1 || most > maxLimit || p.Window <= 0 || ceilMS(p.Window) > maxWindowMS {
		return fmt.Errorf("redis: policy %s is outside what the scripts count exactly (limit 1 to 2^48, window up to 2^48 ms)", p)
	}
	if alg == "sliding" && p.Window%time.Millisecond != 0 {
		return fmt.Errorf("redis: policy %s: a sliding window must be whole milliseconds", p)
	}
	return nil
}

// ClaimPolicy records that a limiter counts under pol until release,
// across every instance on the server(s): it fails with
// store.ErrPolicyConflict while a limiter of pol.Name counts under another
// policy, in this process or in an instance whose heartbeat is live (see
// claimTTL). When every instance of the old policy has gone, the first
// with a new one records it, and that change is logged.
func (s *Store) ClaimPolicy(ctx context.Context, pol driver.Policy) (release func(), err error) {
	if err := checkPolicy(pol); err != nil {
		return nil, err
	}
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	first, local, err := s.claims.Claim(pol)
	if err != nil || !first {
		return local, err
	}
	if err := s.claimShared(ctx, pol, true); err != nil {
		local()
		return nil, err
	}
	s.held[pol.Name] = pol
	s.claims.SetRelease(pol.Name, func() { s.releaseShared(pol.Name) })
	return local, nil
}

// claimShared runs luaClaim for pol (a first claim, or a heartbeat's
// renewal). s.policyMu is held.
func (s *Store) claimShared(ctx context.Context, pol driver.Policy, first bool) error {
	var res []any
	err := s.roundTrip(ctx, func(ctx context.Context) error {
		r, err := scriptClaim.Run(ctx, s.c, []string{s.policyKey(pol.Name)},
			s.id, encodePolicy(pol), claimTTL.Milliseconds()).Slice()
		res = r
		return err
	})
	if err != nil {
		return fmt.Errorf("redis: claim rate policy %s: %w", pol, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redis: claim rate policy %s: unexpected reply %v", pol, res)
	}
	ok, _ := res[0].(int64)
	other, _ := res[1].(string)
	if ok != 1 {
		return fmt.Errorf("%w: running instances count %s, this one %s; stop them all before changing it, or give this limiter another Name",
			store.ErrPolicyConflict, decodePolicy(pol.Name, other), pol)
	}
	if first && other != "" {
		commit.Log(s.opt.Logger).Warn("redis: rate policy changed; open windows keep their counts under the new rule",
			"was", decodePolicy(pol.Name, other), "now", pol.String())
	}
	return nil
}

// releaseShared gives name's claim up: its field is deleted (or, if Redis
// is unreachable, dies with its heartbeat).
func (s *Store) releaseShared(name string) {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	if _, ok := s.held[name]; !ok {
		return
	}
	delete(s.held, name)
	s.roundTrip(context.Background(), func(ctx context.Context) error { //nolint:errcheck // the claim expires anyway
		return s.c.HDel(ctx, s.policyKey(name), s.id).Err()
	})
}

// releaseAll gives up every claim still held, at Close.
func (s *Store) releaseAll() {
	s.policyMu.Lock()
	names := make([]string, 0, len(s.held))
	for name := range s.held {
		names = append(names, name)
	}
	s.policyMu.Unlock()
	for _, name := range names {
		s.releaseShared(name)
	}
}

// heartbeat renews every held claim each heartbeatEvery until Close, and
// judges the primaries (see watchBeat). A
// renewal that finds another policy live (this instance's claim died
// while Redis was unreachable, and another policy was recorded) is logged:
// two policies then count one name's keys.
func (s *Store) heartbeat() {
	defer close(s.stopped)
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.policyMu.Lock()
		for _, pol := range s.held {
			err := s.claimShared(context.Background(), pol, false)
			if err != nil && !isTransient(err) {
				commit.Log(s.opt.Logger).Error("redis: rate policy claim lost", "policy", pol.String(), "err", err)
			}
		}
		s.policyMu.Unlock()
		s.watchBeat()
	}
}

// isTransient reports whether a heartbeat's error is Redis being
// unreachable (the next beat tries again) rather than a conflict.
func isTransient(err error) bool {
	return !errors.Is(err, store.ErrPolicyConflict)
}
