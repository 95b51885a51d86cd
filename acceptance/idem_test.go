//go:build acceptance

package acceptance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The orders the idempotency legs place: one key, one body; the second is a
// different request to reuse a key with.
const (
	mugOrder = `{"sku":"mug","qty":1}`
	teaOrder = `{"sku":"tea-green","qty":2}`
)

// Header names of the idempotency contract (issue 3), and the stable
// problem type of its 503.
const (
	keyHeader       = "Idempotency-Key"
	replayedHeader  = "Idempotency-Replayed"
	idemUnavailable = "https://porch.dev/problems/idempotency-unavailable"
)

// checkout sends POST /checkout with body under key. It never fails the
// test, so goroutines may call it.
func (s *storefront) checkout(key, body string) reply {
	return s.try(http.MethodPost, "/checkout", body, keyHeader, key)
}

// fresh fails unless r is a 201 the handler produced (not a replay) and
// returns its order_id.
func fresh(t *testing.T, r reply) string {
	t.Helper()
	if r.Err != nil || r.Status != http.StatusCreated {
		t.Fatalf("checkout: got %s, want 201", r)
	}
	if got := r.Header.Get(replayedHeader); got != "" {
		t.Errorf("first answer %s: got %q, want none (the handler ran)", replayedHeader, got)
	}
	var o struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(r.Body, &o); err != nil || o.OrderID == "" {
		t.Fatalf("checkout body: got %s (%v), want an order_id", r.Body, err)
	}
	return o.OrderID
}

// checkReplay fails unless r replays first: the same status and
// Content-Type, a byte-identical body, and Idempotency-Replayed: true.
func checkReplay(t *testing.T, r, first reply) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("replay: %v", r.Err)
	}
	if r.Status != first.Status {
		t.Errorf("replay status: got %d, want %d as first answered", r.Status, first.Status)
	}
	if !bytes.Equal(r.Body, first.Body) {
		t.Errorf("replay body: got %q, want byte-identical %q", r.Body, first.Body)
	}
	if got, want := r.Header.Get("Content-Type"), first.Header.Get("Content-Type"); got != want {
		t.Errorf("replay Content-Type: got %q, want %q", got, want)
	}
	if got := r.Header.Get(replayedHeader); got != "true" {
		t.Errorf("replay %s: got %q, want \"true\"", replayedHeader, got)
	}
}

// checkOrders fails unless got (the orders table's order_ids) holds exactly
// want, in any order: one row per 201 answered, none for anything else.
func checkOrders(t *testing.T, got []string, want ...string) {
	t.Helper()
	var extra, missing []string
	for _, id := range got {
		if !slices.Contains(want, id) {
			extra = append(extra, id)
		}
	}
	for _, id := range want {
		if !slices.Contains(got, id) {
			missing = append(missing, id)
		}
	}
	if len(got) != len(want) || len(extra) > 0 || len(missing) > 0 {
		t.Errorf("orders rows: got %d, want %d (one per 201): rows no 201 answered %v, 201s with no row %v",
			len(got), len(want), extra, missing)
	}
}

// sqliteOrders reads every order_id of the storefront's SQLite file.
func sqliteOrders(t *testing.T, path string) []string {
	t.Helper()
	db := openDB(t, path)
	defer db.Close()
	rows, err := db.Query(`SELECT order_id FROM orders`)
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("read orders: %v", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read orders: %v", err)
	}
	return ids
}

// timed is a reply with the moments its request left and its answer was
// read, to show that a burst was in flight at once.
type timed struct {
	reply
	sent, got time.Time
}

// inFlight sends n requests through parallel's start barrier, timing each.
func inFlight(n int, f func(i int) reply) []timed {
	return parallel(n, func(i int) timed {
		sent := time.Now()
		r := f(i)
		return timed{reply: r, sent: sent, got: time.Now()}
	})
}

// checkOverlap fails unless every request left before the first answer
// arrived: a burst that trickled in one at a time would let a broken design
// pass by replaying what the first stored.
func checkOverlap(t *testing.T, ts []timed) {
	t.Helper()
	lastSent, firstGot := ts[0].sent, ts[0].got
	for _, r := range ts {
		if r.sent.After(lastSent) {
			lastSent = r.sent
		}
		if r.got.Before(firstGot) {
			firstGot = r.got
		}
	}
	if !lastSent.Before(firstGot) {
		t.Errorf("burst not in flight at once: the last request left %s after the first answer", lastSent.Sub(firstGot))
	}
}

// checkOneExecution fails unless the answers to duplicates of one keyed
// request show one execution: every one 201 with a byte-identical body,
// exactly one from the handler and every other a replay (parked callers get
// what a replay gives, never 409, 422 or 5xx). It returns the handler's.
func checkOneExecution(t *testing.T, ts []timed) reply {
	t.Helper()
	var owner []reply
	for i, r := range ts {
		if r.Err != nil || r.Status != http.StatusCreated {
			t.Fatalf("duplicate %d of %d: got %s, want 201 (statuses %v)", i+1, len(ts), r.reply, statuses(replies(ts)))
		}
		if r.Header.Get(replayedHeader) == "" {
			owner = append(owner, r.reply)
		}
	}
	if len(owner) != 1 {
		t.Fatalf("answers from the handler: got %d, want 1 and %d replays", len(owner), len(ts)-1)
	}
	for i, r := range ts {
		if r.Header.Get(replayedHeader) != "" {
			if !bytes.Equal(r.Body, owner[0].Body) {
				t.Errorf("duplicate %d body: got %q, want byte-identical %q", i+1, r.Body, owner[0].Body)
			}
			checkReplay(t, r.reply, owner[0])
		}
	}
	return owner[0]
}

func replies(ts []timed) []reply {
	rs := make([]reply, len(ts))
	for i, r := range ts {
		rs[i] = r.reply
	}
	return rs
}

// waitFor polls cond until it holds, failing the test with what after
// timeout. It is how a leg waits for a state it can observe.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		<-tick.C
	}
}

// A replayed key: the same status, a byte-identical body and
// Idempotency-Replayed: true, and no second orders row.
func TestIdemReplay(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t))
	key := uuid.NewString()
	first := s.checkout(key, mugOrder)
	id := fresh(t, first)
	checkOrders(t, sqliteOrders(t, s.db), id)

	for i := range 3 {
		checkReplay(t, s.checkout(key, mugOrder), first)
		if got := rowCount(t, s.db, "orders"); got != 1 {
			t.Fatalf("orders rows after replay %d: got %d, want 1", i+1, got)
		}
	}
	t.Logf("key %s: 201 order %s, then 3 replays byte-identical; 1 orders row", key, id)
}

// A key reused for a different body: 422 problem+json, nothing written, and
// the stored response still replays for the original body.
func TestIdemKeyReused(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t))
	key := uuid.NewString()
	first := s.checkout(key, mugOrder)
	id := fresh(t, first)

	r := s.checkout(key, teaOrder)
	checkProblem(t, r, http.StatusUnprocessableEntity)
	if r.Header.Get(replayedHeader) != "" {
		t.Errorf("422 %s: got %q, want none", replayedHeader, r.Header.Get(replayedHeader))
	}
	checkOrders(t, sqliteOrders(t, s.db), id)
	checkReplay(t, s.checkout(key, mugOrder), first)
	checkOrders(t, sqliteOrders(t, s.db), id)
}

// K identical keyed requests in flight at once, each held in the handler
// for 300ms: one orders row, one answer for all.
func TestIdemConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const k = 24
	s := startStorefront(t, newDB(t), "-checkout-delay", "300ms")
	s.warm(t, k)
	key := uuid.NewString()

	ts := inFlight(k, func(int) reply { return s.checkout(key, mugOrder) })
	checkOverlap(t, ts)
	owner := checkOneExecution(t, ts)
	checkOrders(t, sqliteOrders(t, s.db), fresh(t, owner))
	t.Logf("%d duplicates in flight at once: %v, 1 from the handler, %d replays; 1 orders row", k, statuses(replies(ts)), k-1)
}

// K different keys at once: K executions, K rows.
func TestIdemConcurrentDistinct(t *testing.T) {
	t.Parallel()
	const k = 24
	s := startStorefront(t, newDB(t), "-checkout-delay", "300ms")
	s.warm(t, k)

	ts := inFlight(k, func(int) reply { return s.checkout(uuid.NewString(), mugOrder) })
	checkOverlap(t, ts)
	var ids []string
	for _, r := range ts {
		ids = append(ids, fresh(t, r.reply))
	}
	checkOrders(t, sqliteOrders(t, s.db), ids...)
}

// A missing or malformed key is refused with 400 problem+json before
// anything runs; a key of exactly 255 printable bytes, the boundary, is
// accepted.
func TestIdemInvalidKeys(t *testing.T) {
	t.Parallel()
	s := startStorefront(t, newDB(t))
	cases := []struct {
		name   string
		header []string // key, value pairs
	}{
		{"missing", nil},
		{"empty", []string{keyHeader, ""}},
		{"empty quoted", []string{keyHeader, `""`}},
		{"256 bytes", []string{keyHeader, strings.Repeat("k", 256)}},
		{"256 bytes quoted", []string{keyHeader, `"` + strings.Repeat("k", 256) + `"`}},
		{"tab inside", []string{keyHeader, "abc\tdef"}},
		{"non-ASCII", []string{keyHeader, "clé-" + uuid.NewString()}},
		{"Unicode spaces around", []string{keyHeader, "\u00a0" + uuid.NewString() + "\u3000"}},
		{"two headers", []string{keyHeader, uuid.NewString(), keyHeader, uuid.NewString()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.try(http.MethodPost, "/checkout", mugOrder, tc.header...)
			if r.Err != nil {
				t.Fatalf("POST /checkout: %v", r.Err)
			}
			checkProblem(t, r, http.StatusBadRequest)
		})
	}
	// Control characters other than tab never reach a handler: net/http
	// refuses the request line by itself, with a plain-text 400. What
	// matters here is that nothing runs.
	for _, c := range []byte{0x01, 0x1b, 0x7f} {
		t.Run("control "+strconv.Quote(string(c)), func(t *testing.T) {
			r := s.raw(t, "POST /checkout HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
				keyHeader+": abc"+string(c)+"def\r\nContent-Length: "+strconv.Itoa(len(mugOrder))+"\r\nConnection: close\r\n\r\n"+mugOrder)
			if r.Status != http.StatusBadRequest {
				t.Errorf("status: got %s, want 400", r)
			}
		})
	}
	if got := rowCount(t, s.db, "orders"); got != 0 {
		t.Fatalf("orders rows after the refused keys: got %d, want 0", got)
	}
	if got := rowCount(t, s.db, "porch_idem_responses"); got != 0 {
		t.Errorf("porch_idem_responses rows after the refused keys: got %d, want 0", got)
	}

	longest := s.checkout(strings.Repeat("k", 255), mugOrder)
	checkOrders(t, sqliteOrders(t, s.db), fresh(t, longest))
}

// raw sends request, written out byte for byte, on a connection of its own
// and reads one response: for requests net/http's client refuses to send.
func (s *storefront) raw(t *testing.T, request string) reply {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // a fresh conn
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatalf("write raw request: %v", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read raw response: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return reply{Status: res.StatusCode, Header: res.Header, Body: b, Err: err}
}

// kill -9 while the owner of a key is inside its handler leaves no owner:
// after a restart on the same file the retry runs the handler (the one
// orders row is the retry's) and a further retry replays it.
func TestIdemKill9MidHandler(t *testing.T) {
	t.Parallel()
	atEachDurability(t, testIdemKill9MidHandler)
}

func testIdemKill9MidHandler(t *testing.T, durability []string) {
	a := startStorefront(t, newDB(t), with(durability, "-checkout-delay", "2s")...)
	key := uuid.NewString()
	killed := make(chan reply, 1)
	go func() { killed <- a.checkout(key, mugOrder) }() // joined below

	// The limiter's count is durable before the request goes on to the
	// key and the handler: once the row appears the owner is past the
	// limiter, and the handler holds it for 2s.
	waitFor(t, 10*time.Second, "the checkout counted in porch_rate_counters", func() bool {
		return len(counters(t, a.db)) == 1
	})
	a.kill(t)
	if r := <-killed; r.Err == nil {
		t.Fatalf("the killed owner's request: got %s, want no answer (the handler was to take 2s)", r)
	}
	if got := rowCount(t, a.db, "orders"); got != 0 {
		t.Fatalf("orders rows after kill -9 mid-handler: got %d, want 0", got)
	}

	b := startStorefront(t, a.db, durability...)
	retry := b.checkout(key, mugOrder)
	id := fresh(t, retry)
	checkOrders(t, sqliteOrders(t, a.db), id)
	checkReplay(t, b.checkout(key, mugOrder), retry)
	checkOrders(t, sqliteOrders(t, a.db), id)
	t.Logf("kill -9 mid-handler, restart: retry 201 order %s from the handler, then a replay; 1 orders row", id)
}

// A saturated pool (one actor, a one-job mailbox, 200ms commits) refuses
// with 503 and Retry-After rather than queueing, and a refused request
// leaves no row: the orders rows are exactly the 201s. First a burst, then
// a sustained stream, under which requests the limiter admitted may also
// meet a full mailbox at the key's actor (idempotency-unavailable). Refused
// keys are not wedged: their retries run.
func TestIdemSaturated(t *testing.T) {
	t.Parallel()
	const burst, streams, stream, retries = 64, 48, 1500 * time.Millisecond, 3
	s := startStorefront(t, newDB(t), "-pool", "1", "-mailbox", "1", "-store-delay", "200ms", "-rate-limit", "100000")
	s.warm(t, burst)

	type keyed struct {
		key string
		reply
	}
	send := func() keyed {
		key := uuid.NewString()
		return keyed{key, s.checkout(key, mugOrder)}
	}
	rs := parallel(burst, func(int) keyed { return send() })
	stop := time.Now().Add(stream)
	for _, more := range parallel(streams, func(int) []keyed {
		var out []keyed
		for time.Now().Before(stop) {
			out = append(out, send())
		}
		return out
	}) {
		rs = append(rs, more...)
	}

	counts := make(map[int]int)
	types := make(map[string]int)
	var ids, refused []string
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("checkout on a saturated pool: got %s, want 201 or 503", r.reply)
		}
		counts[r.Status]++
		switch r.Status {
		case http.StatusCreated:
			ids = append(ids, fresh(t, r.reply))
		case http.StatusServiceUnavailable:
			checkProblem(t, r.reply, http.StatusServiceUnavailable)
			if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("503 Retry-After: got %q, want whole seconds ≥ 1", r.Header.Get("Retry-After"))
			}
			var p struct{ Type string }
			json.Unmarshal(r.Body, &p) //nolint:errcheck // checkProblem judged the body
			types[p.Type]++
			if p.Type == idemUnavailable { // admitted, then refused at the key: retry these first
				refused = append([]string{r.key}, refused...)
			} else {
				refused = append(refused, r.key)
			}
		default:
			t.Fatalf("checkout on a saturated pool: got %s, want 201 or 503", r.reply)
		}
	}
	if counts[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("%d keyed checkouts on a saturated pool: got statuses %v, want some 503", len(rs), counts)
	}
	checkOrders(t, sqliteOrders(t, s.db), ids...)

	for _, key := range refused[:min(retries, len(refused))] {
		ids = append(ids, fresh(t, s.checkout(key, mugOrder)))
	}
	checkOrders(t, sqliteOrders(t, s.db), ids...)
	t.Logf("%d keyed checkouts (a burst of %d, then %s of %d streams) on -pool 1 -mailbox 1 -store-delay 200ms: %v, orders rows = 201s; 503 types %v; %d refused keys retried: 201",
		len(rs), burst, stream, streams, counts, types, min(retries, len(refused)))
}
