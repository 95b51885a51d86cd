package shed

import (
	"fmt"
	"strconv"
	"testing"
)

// A reserve written in decimal keeps the slots it says at every capacity,
// not one fewer for the binary rounding of the fraction: the product's
// rounding error grows with the capacity, so the snap to a whole number
// must too.
func TestReservedDecimal(t *testing.T) {
	for _, digits := range []int{2, 3, 4} {
		den := int64(1)
		for range digits {
			den *= 10
		}
		for k := int64(1); k < den; k++ {
			text := fmt.Sprintf("0.%0*d", digits, k)
			f, err := strconv.ParseFloat(text, 64)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int64{1, 7, 100, 4096, 1 << 20, 10_000_000, 123_456_789, 1_000_000_000, 1 << 40} {
				want := min(n*k/den, n-1)
				if got := reserved(int(n), f); got != want {
					t.Fatalf("reserved(%d, %s): got %d, want %d", n, text, got, want)
				}
			}
		}
	}
}
