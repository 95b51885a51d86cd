//go:build acceptance

package acceptance

import "testing"

// durabilityLevels are the storefront's -durability values. A kill -9 of
// the storefront must leave the same behind at either: under
// process-crash a count is answered before its fsync, but a killed
// process cannot take back what it handed the operating system or the
// database server.
var durabilityLevels = []string{"power-loss", "process-crash"}

// atEachDurability runs leg once per level, in parallel subtests named
// after the level (so that -run Kill9 still selects both), each with the
// flags that set it, for every storefront the leg starts.
func atEachDurability(t *testing.T, leg func(t *testing.T, durability []string)) {
	for _, level := range durabilityLevels {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			leg(t, []string{"-durability", level})
		})
	}
}

// with returns flags followed by more, in a slice of its own, so that
// appending to one leg's flags never writes into another's.
func with(flags []string, more ...string) []string {
	return append(append([]string(nil), flags...), more...)
}
