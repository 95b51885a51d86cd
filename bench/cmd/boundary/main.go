// Command boundary measures what each rate-limit algorithm lets through at
// a window's edges: it replays request schedules through real porch
// limiters on SQLite, on a fake clock, and reports for each algorithm the
// most requests served in any span one window long (half-open, [a, a+W)).
// Every run is deterministic: the clock moves only between a schedule's
// instants, and the random schedule is seeded.
//
//	cd bench && go run ./cmd/boundary                   # the table docs/algorithms.md quotes
//	cd bench && go run ./cmd/boundary -svg ../docs/algorithms-boundary.svg
//
// A schedule is a list of instants, each with a number of attempts made at
// once; the attempts of one instant stop at the first refusal (no time
// passes between them, so every later one would be refused too).
//
// The same rules run in the PostgreSQL driver's statements (the store
// conformance tests hold both to the Go rule), so the numbers hold there;
// PostgreSQL's clock cannot be faked, so only SQLite is driven here.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/porchtest"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// instant is one moment of a schedule: n attempts at offset at.
type instant struct {
	at time.Duration
	n  int
}

// schedule is a named list of instants in time order.
type schedule struct {
	name, what string
	instants   []instant
}

// limiterKind is an algorithm with its burst, as a column of the table.
type limiterKind struct {
	name  string
	alg   rate.Algorithm
	burst int
}

// outcome is one schedule replayed through one limiter.
type outcome struct {
	served  []time.Duration // offsets of the allowed requests, in order
	maxSpan int             // most served in any [a, a+W)
	firstIn time.Duration   // wait a first refusal was told (RetryAt − now); -1 if none
}

func main() {
	limit := flag.Int("limit", 100, "requests per window (N)")
	window := flag.Duration("window", 10*time.Second, "the window (W), whole milliseconds")
	burst := flag.Int("small-burst", 20, "the burst of the second GCRA column")
	seed := flag.Uint64("seed", 1, "seed of the random schedule")
	svg := flag.String("svg", "", "also draw served-in-the-last-window over time for the \"pair, then retries\" schedule to this SVG file")
	flag.Parse()
	if err := run(os.Stdout, *limit, *window, *burst, *seed, *svg); err != nil {
		fmt.Fprintln(os.Stderr, "boundary:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, n int, w time.Duration, smallBurst int, seed uint64, svg string) error {
	kinds := []limiterKind{
		{"fixed", rate.FixedWindow, 0},
		{"sliding", rate.SlidingWindow, 0},
		{fmt.Sprintf("GCRA, burst %d (= N)", n), rate.GCRA, 0},
		{fmt.Sprintf("GCRA, burst %d", smallBurst), rate.GCRA, smallBurst},
	}
	scheds := schedules(n, w, seed)
	dir, err := os.MkdirTemp("", "porch-boundary-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	results := make(map[[2]int]outcome)
	for si, s := range scheds {
		for ki, k := range kinds {
			o, err := replay(filepath.Join(dir, fmt.Sprintf("%d-%d.db", si, ki)), n, w, k, s)
			if err != nil {
				return fmt.Errorf("%s through %s: %w", s.name, k.name, err)
			}
			results[[2]int{si, ki}] = o
		}
	}

	fmt.Fprintf(out, "N = %d per W = %s; most requests served in any span of one window, [a, a+W) (in brackets: served over the whole schedule).\n\n", n, w)
	fmt.Fprint(out, "| schedule |")
	for _, k := range kinds {
		fmt.Fprintf(out, " %s |", k.name)
	}
	fmt.Fprint(out, "\n| --- |", strings.Repeat(" ---: |", len(kinds)), "\n")
	for si, s := range scheds {
		fmt.Fprintf(out, "| %s |", s.name)
		for ki := range kinds {
			o := results[[2]int{si, ki}]
			fmt.Fprintf(out, " %d (%d) |", o.maxSpan, len(o.served))
		}
		fmt.Fprintln(out)
	}
	fmt.Fprint(out, "| first refusal's wait (flood) |")
	flood := slices.IndexFunc(scheds, func(s schedule) bool { return strings.HasPrefix(s.name, "flood") })
	for ki := range kinds {
		o := results[[2]int{flood, ki}]
		fmt.Fprintf(out, " %s |", o.firstIn.Round(time.Millisecond))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "The attempts of one instant stop at its first refusal.")
	for _, s := range scheds {
		fmt.Fprintf(out, "- %s: %s; %d requests offered\n", s.name, s.what, offered(s))
	}
	if svg != "" {
		pair := slices.IndexFunc(scheds, func(s schedule) bool { return strings.HasPrefix(s.name, "pair, then") })
		var series []line
		for ki, k := range kinds {
			series = append(series, line{name: k.name, served: results[[2]int{pair, ki}].served})
		}
		f, err := os.Create(svg)
		if err != nil {
			return err
		}
		err = drawSVG(f, n, w, 3*w, series)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "boundary: wrote %s\n", svg)
	}
	return nil
}

// schedules are the replayed schedules for n per w.
func schedules(n int, w time.Duration, seed uint64) []schedule {
	const tick = 10 * time.Millisecond
	pair := []instant{{0, 1}, {w - time.Millisecond, n}, {w, n}}
	retries := slices.Clone(pair)
	for t := w + tick; t < 3*w; t += tick {
		retries = append(retries, instant{t, 1})
	}
	var flood []instant
	for t := time.Duration(0); t < 4*w; t += w / time.Duration(4*n) {
		flood = append(flood, instant{t, 1})
	}
	var greedy []instant
	for t := time.Duration(0); t < 3*w; t += tick {
		greedy = append(greedy, instant{t, n})
	}
	r := rand.New(rand.NewPCG(seed, 0))
	var random []instant
	for t := time.Duration(0); t < 4*w; t += time.Duration(r.ExpFloat64() * float64(w/8)).Truncate(time.Millisecond) {
		random = append(random, instant{t, 1 + r.IntN(n/2)})
	}
	return []schedule{
		{"pair", fmt.Sprintf("one request at 0 opens the window, %d at W − 1 ms, %d at W", n, n), pair},
		{"pair, then retries", "the pair, then one attempt every 10 ms until 3W (a client that keeps trying)", retries},
		{"flood (4 × rate)", fmt.Sprintf("one attempt every W/%d until 4W", 4*n), flood},
		{"greedy", fmt.Sprintf("%d attempts every 10 ms until 3W", n), greedy},
		{fmt.Sprintf("random (seed %d)", seed), fmt.Sprintf("bursts of 1 to %d at exponential gaps of mean W/8, until 4W", n/2), random},
	}
}

// replay runs s through a fresh limiter of kind k on a SQLite file at path.
func replay(path string, n int, w time.Duration, k limiterKind, s schedule) (outcome, error) {
	ctx := context.Background()
	o := outcome{firstIn: -1}
	clk := porchtest.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(path, sqlite.Options{Options: store.Options{Clock: clk}})
	if err != nil {
		return o, err
	}
	defer st.Close(ctx)
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(ctx)
	lim, err := rate.New(pool, st, n, w, rate.Options{Algorithm: k.alg, Burst: k.burst})
	if err != nil {
		return o, err
	}
	defer lim.Close(ctx)
	var now time.Duration
	for _, in := range s.instants {
		clk.Advance(in.at - now)
		now = in.at
		for range in.n {
			v, err := lim.Allow(ctx, "client")
			if err != nil {
				return o, err
			}
			if !v.Allowed {
				if o.firstIn < 0 {
					o.firstIn = v.RetryAt.Sub(clk.Wall())
				}
				break
			}
			o.served = append(o.served, now)
		}
	}
	o.maxSpan = maxInSpan(o.served, w)
	return o, nil
}

// offered is how many requests s asks for in all.
func offered(s schedule) int {
	total := 0
	for _, in := range s.instants {
		total += in.n
	}
	return total
}

// maxInSpan is the most of the sorted offsets in any [a, a+w).
func maxInSpan(t []time.Duration, w time.Duration) int {
	best, j := 0, 0
	for i := range t {
		for j < len(t) && t[j] < t[i]+w {
			j++
		}
		best = max(best, j-i)
	}
	return best
}
