package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// keysResponse is a stored response as idem makes one, told apart by body.
func keysResponse(body string) driver.Response {
	d := sha256.Sum256([]byte("POST /orders " + body))
	return driver.Response{
		Digest:      d[:],
		Status:      http.StatusCreated,
		ContentType: "application/json",
		Body:        []byte(body),
		Header:      http.Header{"Location": {"/orders/" + body}},
	}
}

// sameResponse reports how got differs from want as saved under key, or
// "" if it does not: every field the owner saved, and the key.
func sameResponse(got, want driver.Response, key string) string {
	var diffs []string
	if got.Key != key {
		diffs = append(diffs, fmt.Sprintf("Key %q, want %q", got.Key, key))
	}
	if !bytes.Equal(got.Digest, want.Digest) {
		diffs = append(diffs, fmt.Sprintf("Digest %x, want %x", got.Digest, want.Digest))
	}
	if got.Status != want.Status {
		diffs = append(diffs, fmt.Sprintf("Status %d, want %d", got.Status, want.Status))
	}
	if got.ContentType != want.ContentType {
		diffs = append(diffs, fmt.Sprintf("ContentType %q, want %q", got.ContentType, want.ContentType))
	}
	if !bytes.Equal(got.Body, want.Body) {
		diffs = append(diffs, fmt.Sprintf("Body %q, want %q", got.Body, want.Body))
	}
	if len(got.Header) != 0 || len(want.Header) != 0 {
		if !reflect.DeepEqual(got.Header, want.Header) {
			diffs = append(diffs, fmt.Sprintf("Header %v, want %v", got.Header, want.Header))
		}
	}
	return strings.Join(diffs, "; ")
}

// keysCtx is a context for one call of the suite.
func keysCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), keysTimeout)
}

// reserve holds key within keysPrompt, failing t if it cannot: the key is
// free, or about to be.
func (k *keysDB) reserve(t *testing.T, key string) driver.Reservation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), keysPrompt)
	defer cancel()
	r, err := k.st.Reserve(ctx, key)
	if err != nil {
		t.Fatalf("Reserve(%.40q) of a free key: %v", key, err)
	}
	if r == nil {
		t.Fatalf("Reserve(%.40q): a nil reservation and no error", key)
	}
	return r
}

// loadHeld is r.Load, failing t on error.
func loadHeld(t *testing.T, r driver.Reservation, why string) (driver.Response, bool) {
	t.Helper()
	ctx, cancel := keysCtx()
	defer cancel()
	res, ok, err := r.Load(ctx)
	if err != nil {
		t.Fatalf("%s: Load: %v", why, err)
	}
	return res, ok
}

// saveHeld is r.Save, failing t on error.
func saveHeld(t *testing.T, r driver.Reservation, res driver.Response, ttl time.Duration) {
	t.Helper()
	ctx, cancel := keysCtx()
	defer cancel()
	if err := r.Save(ctx, res, ttl); err != nil {
		t.Fatalf("Save: %v", err)
	}
}

// store saves res under key as a fresh owner would: reserve, find nothing,
// save.
func (k *keysDB) store(t *testing.T, key string, res driver.Response, ttl time.Duration) {
	t.Helper()
	r := k.reserve(t, key)
	defer r.Release()
	if old, ok := loadHeld(t, r, "a key never saved"); ok {
		t.Fatalf("Load of %.40q before any Save: %+v, want none", key, old)
	}
	saveHeld(t, r, res, ttl)
}

// inspect is Inspect, failing t on error.
func (k *keysDB) inspect(t *testing.T, key string) (driver.Response, bool) {
	t.Helper()
	ctx, cancel := keysCtx()
	defer cancel()
	res, ok, err := k.st.Inspect(ctx, key)
	if err != nil {
		t.Fatalf("Inspect(%.40q) of a free key: %v", key, err)
	}
	return res, ok
}

// forget is Forget, failing t on error.
func (k *keysDB) forget(t *testing.T, key string) {
	t.Helper()
	ctx, cancel := keysCtx()
	defer cancel()
	if err := k.st.Forget(ctx, key); err != nil {
		t.Fatalf("Forget(%.40q) of a free key: %v", key, err)
	}
}

// A saved response comes back whole, to the next owner and to Inspect,
// with the key, and Created and Expires the TTL apart; an empty one too.
func testKeysRoundTrip(t *testing.T, h KeysHarness) {
	k := h.open(t)
	if res, ok := k.inspect(t, "order-1"); ok {
		t.Fatalf("Inspect of a fresh database: %+v, want none", res)
	}
	const ttl = time.Hour
	want := keysResponse("1")
	before := time.Now()
	k.store(t, "order-1", want, ttl)
	got, ok := k.inspect(t, "order-1")
	if !ok {
		t.Fatal("Inspect after Save: none, want the saved response")
	}
	if d := sameResponse(got, want, "order-1"); d != "" {
		t.Errorf("Inspect after Save: %s", d)
	}
	// Times are on the store's clock (the database's, for a shared
	// store), rounded to its precision: near the wall clock, and the TTL
	// apart to the millisecond.
	if lo, hi := before.Add(-time.Minute), time.Now().Add(time.Minute); got.Created.Before(lo) || got.Created.After(hi) {
		t.Errorf("Created %v, want about now, %v", got.Created, before)
	}
	if d := got.Expires.Sub(got.Created); d < ttl-time.Millisecond || d > ttl+time.Millisecond {
		t.Errorf("Expires - Created = %v, want the TTL, %v", d, ttl)
	}

	r := k.reserve(t, "order-1")
	got, ok = loadHeld(t, r, "the next owner")
	r.Release()
	if !ok {
		t.Fatal("the next owner's Load: none, want the saved response")
	}
	if d := sameResponse(got, want, "order-1"); d != "" {
		t.Errorf("the next owner's Load: %s", d)
	}

	empty := driver.Response{Digest: want.Digest, Status: http.StatusNoContent}
	k.store(t, "order-2", empty, ttl)
	if got, ok := k.inspect(t, "order-2"); !ok || got.Status != http.StatusNoContent || len(got.Body) != 0 || len(got.Header) != 0 {
		t.Errorf("an empty 204 saved: Inspect %+v, ok %v; want it back with no body and no header", got, ok)
	}
}

// What a store hands back is its own: changing the slices and header an
// owner saved, or those a Load returned, changes nothing stored.
func testKeysCopies(t *testing.T, h KeysHarness) {
	k := h.open(t)
	saved := keysResponse("original")
	want := keysResponse("original")
	k.store(t, "k", saved, time.Hour)
	saved.Body[0], saved.Digest[0] = 'X', ^saved.Digest[0]
	saved.Header.Set("Location", "/changed-by-the-owner")

	r := k.reserve(t, "k")
	got, ok := loadHeld(t, r, "after the owner changed what it saved")
	r.Release()
	if !ok {
		t.Fatal("Load: none, want the saved response")
	}
	if d := sameResponse(got, want, "k"); d != "" {
		t.Fatalf("the saver changed its slices after Save, and the stored response changed with them: %s", d)
	}
	got.Body[0], got.Digest[0] = 'Y', ^got.Digest[0]
	got.Header.Set("Location", "/changed-by-a-reader")
	if again, _ := k.inspect(t, "k"); sameResponse(again, want, "k") != "" {
		t.Errorf("a reader changed the response it loaded, and the stored one changed with it: %s", sameResponse(again, want, "k"))
	}
}

// A response is stored once Save returns: a store closed and opened again
// on the same database hands it back.
func testKeysDurable(t *testing.T, h KeysHarness) {
	if h.Forgets {
		t.Skip("the store keeps nothing once closed (KeysHarness.Forgets)")
	}
	k := h.open(t)
	want := keysResponse("durable")
	k.store(t, "k", want, time.Hour)
	k.restart(t)
	got, ok := k.inspect(t, "k")
	if !ok {
		t.Fatal("after a restart: Inspect finds none, want the response saved before it")
	}
	if d := sameResponse(got, want, "k"); d != "" {
		t.Errorf("after a restart: %s", d)
	}
	r := k.reserve(t, "k")
	defer r.Release()
	if _, ok := loadHeld(t, r, "after a restart"); !ok {
		t.Error("after a restart: the next owner's Load finds none, want the response")
	}
}

// One owner per key at a time: a second Reserve waits, and gives up with
// its context's error; it gets in once the first owner lets go; other
// keys are not held up; owners hammering one key never overlap.
func testKeysExclusive(t *testing.T, h KeysHarness) {
	k := h.open(t)
	first := k.reserve(t, "k")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	r, err := reserveBounded(t, k.st, ctx, "k")
	cancel()
	if err == nil {
		r.Release()
		t.Fatal("a second Reserve while the first owner holds the key: granted, want it to wait")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second Reserve that timed out waiting: %v, want its context's error (context.DeadlineExceeded)", err)
	}

	other := k.reserve(t, "another key")
	other.Release()

	waiter := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), keysPrompt)
		defer cancel()
		r, err := k.st.Reserve(ctx, "k")
		if err == nil {
			r.Release()
		}
		waiter <- err
	}()
	select {
	case err := <-waiter:
		t.Fatalf("a waiting Reserve returned (%v) while the first owner still held the key", err)
	default:
	}
	first.Release()
	if err := <-waiter; err != nil {
		t.Fatalf("a waiting Reserve after the owner released: %v, want it granted", err)
	}

	const owners, rounds = 8, 20
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range owners {
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), keysPrompt)
				r, err := k.st.Reserve(ctx, "hammered")
				cancel()
				if err != nil {
					t.Errorf("Reserve among %d owners: %v", owners, err)
					return
				}
				n := inside.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				runtime.Gosched()
				inside.Add(-1)
				r.Release()
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("%d owners reserving one key %d times each: up to %d held it at once, want 1", owners, rounds, m)
	}
}

// reserveBounded calls Reserve under ctx, failing t if the call outlives
// ctx by keysPrompt: a store that ignores ctx would hang the suite.
func reserveBounded(t *testing.T, st driver.KeyStore, ctx context.Context, key string) (driver.Reservation, error) {
	t.Helper()
	type result struct {
		r   driver.Reservation
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := st.Reserve(ctx, key)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-time.After(keysPrompt + 100*time.Millisecond):
		t.Fatalf("Reserve(%q) still waiting %v after its context ended", key, keysPrompt)
		return nil, nil
	}
}

// Release lets the next owner in at once, finding nothing stored, and is
// safe to call twice.
func testKeysRelease(t *testing.T, h KeysHarness) {
	k := h.open(t)
	first := k.reserve(t, "k")
	first.Release()
	first.Release()
	next := k.reserve(t, "k")
	defer next.Release()
	if res, ok := loadHeld(t, next, "after an owner released without saving"); ok {
		t.Errorf("the next owner's Load: %+v, want none (nothing was saved)", res)
	}
}

// An owner's statement that fails takes its response with it: Save fails
// with store.ErrWriteFailed and nothing is stored. With a table to write
// (KeysHarness.Writes), the owner's writes commit with Save and are
// discarded by Release.
func testKeysOwnerWrites(t *testing.T, h KeysHarness) {
	k := h.open(t)
	r := k.reserve(t, "failing")
	ctx, cancel := keysCtx()
	execErr := r.Exec(ctx, "INSERT INTO storetest_no_such_table (note) VALUES ('failed')")
	saveErr := r.Save(ctx, keysResponse("failing"), time.Hour)
	cancel()
	r.Release()
	if execErr != nil && !errors.Is(execErr, store.ErrWriteFailed) {
		t.Errorf("Exec of a statement that cannot run: %v, want nil (run at Save) or store.ErrWriteFailed", execErr)
	}
	if !errors.Is(saveErr, store.ErrWriteFailed) {
		t.Errorf("Save after an owner's statement failed: %v, want store.ErrWriteFailed", saveErr)
	}
	if res, ok := k.inspect(t, "failing"); ok {
		t.Errorf("after a Save whose owner's statement failed: Inspect %+v, want none stored", res)
	}
	if h.Writes == nil {
		return
	}

	count := h.Writes(t, k.st)
	exec := func(r driver.Reservation, note string) {
		t.Helper()
		ctx, cancel := keysCtx()
		defer cancel()
		if err := r.Exec(ctx, "INSERT INTO storetest_writes (note) VALUES ('"+note+"')"); err != nil {
			t.Fatalf("Exec of the owner's insert: %v", err)
		}
	}
	r = k.reserve(t, "released")
	exec(r, "released")
	r.Release()
	if n := count("released"); n != 0 {
		t.Errorf("an owner's write, then Release: %d rows, want 0 (discarded)", n)
	}
	r = k.reserve(t, "saved")
	exec(r, "saved")
	saveHeld(t, r, keysResponse("saved"), time.Hour)
	if n := count("saved"); n != 1 {
		t.Errorf("an owner's write, then Save: %d rows, want 1 (committed with the response)", n)
	}
}

// A response past its TTL is gone: to Inspect and to the next owner, who
// may save a new one.
func testKeysExpiry(t *testing.T, h KeysHarness) {
	const ttl, margin = 250 * time.Millisecond, 150 * time.Millisecond
	k := h.open(t)
	r := k.reserve(t, "k")
	// The TTL starts somewhere inside Save: no sooner than began, no
	// later than saved. A loaded machine can spend most of the TTL in
	// the commit itself, so a miss counts only when even the earliest
	// start leaves the response live.
	began := time.Now()
	saveHeld(t, r, keysResponse("short-lived"), ttl)
	saved := time.Now()
	r.Release()
	if _, ok := k.inspect(t, "k"); !ok && time.Since(began) < ttl {
		t.Fatalf("Inspect %v after Save began, within its TTL of %v: none, want the response", time.Since(began), ttl)
	}
	// Time the TTL must take to pass, on the store's clock; not
	// synchronisation.
	time.Sleep(time.Until(saved.Add(ttl + margin)))
	if res, ok := k.inspect(t, "k"); ok {
		t.Errorf("Inspect %v after a TTL of %v: %+v, want none", time.Since(saved), ttl, res)
	}
	r = k.reserve(t, "k")
	if res, ok := loadHeld(t, r, "past the TTL"); ok {
		r.Release()
		t.Fatalf("the next owner's Load %v after a TTL of %v: %+v, want none", time.Since(saved), ttl, res)
	}
	want := keysResponse("renewed")
	saveHeld(t, r, want, time.Hour)
	if got, ok := k.inspect(t, "k"); !ok || sameResponse(got, want, "k") != "" {
		t.Errorf("a new response saved over an expired one: Inspect %+v, ok %v; want the new one", got, ok)
	}
}

// Inspect and Forget refuse a held key with store.ErrKeyHeld, and Forget
// then deletes nothing; on a free key Forget deletes, durably, and both
// take a key never stored in their stride.
func testKeysInspectForget(t *testing.T, h KeysHarness) {
	k := h.open(t)
	k.forget(t, "never stored")
	want := keysResponse("kept")
	k.store(t, "k", want, time.Hour)
	k.store(t, "other", keysResponse("other"), time.Hour)

	r := k.reserve(t, "k")
	ctx, cancel := keysCtx()
	_, _, inspectErr := k.st.Inspect(ctx, "k")
	forgetErr := k.st.Forget(ctx, "k")
	cancel()
	r.Release()
	if !errors.Is(inspectErr, store.ErrKeyHeld) {
		t.Errorf("Inspect while an owner holds the key: %v, want store.ErrKeyHeld", inspectErr)
	}
	if !errors.Is(forgetErr, store.ErrKeyHeld) {
		t.Errorf("Forget while an owner holds the key: %v, want store.ErrKeyHeld", forgetErr)
	}
	if got, ok := k.inspect(t, "k"); !ok || sameResponse(got, want, "k") != "" {
		t.Fatalf("after a refused Forget: Inspect %+v, ok %v; want the response untouched", got, ok)
	}

	k.forget(t, "k")
	if res, ok := k.inspect(t, "k"); ok {
		t.Errorf("Inspect after Forget: %+v, want none", res)
	}
	r = k.reserve(t, "k")
	res, ok := loadHeld(t, r, "after Forget")
	r.Release()
	if ok {
		t.Errorf("the next owner's Load after Forget: %+v, want none", res)
	}
	if h.Forgets {
		return
	}
	k.restart(t)
	if res, ok := k.inspect(t, "k"); ok {
		t.Errorf("after Forget and a restart: Inspect %+v, want none (the deletion was durable)", res)
	}
	if _, ok := k.inspect(t, "other"); !ok {
		t.Error("after Forget of another key and a restart: Inspect finds none, want the response not forgotten")
	}
}

// A reservation ended by Save or Release refuses its methods with
// driver.ErrReleased, and Save lets the next owner in.
func testKeysEnded(t *testing.T, h KeysHarness) {
	k := h.open(t)
	ended := func(r driver.Reservation, how string) {
		t.Helper()
		ctx, cancel := keysCtx()
		defer cancel()
		if _, _, err := r.Load(ctx); !errors.Is(err, driver.ErrReleased) {
			t.Errorf("Load after %s: %v, want driver.ErrReleased", how, err)
		}
		if err := r.Exec(ctx, "INSERT INTO storetest_writes (note) VALUES ('late')"); !errors.Is(err, driver.ErrReleased) {
			t.Errorf("Exec after %s: %v, want driver.ErrReleased", how, err)
		}
		if err := r.Save(ctx, keysResponse("late"), time.Hour); !errors.Is(err, driver.ErrReleased) {
			t.Errorf("Save after %s: %v, want driver.ErrReleased", how, err)
		}
		r.Release()
	}
	r := k.reserve(t, "k")
	saveHeld(t, r, keysResponse("first"), time.Hour)
	ended(r, "Save")
	r = k.reserve(t, "k")
	r.Release()
	ended(r, "Release")
	if got, ok := k.inspect(t, "k"); !ok || sameResponse(got, keysResponse("first"), "k") != "" {
		t.Errorf("after late calls on ended reservations: Inspect %+v, ok %v; want the first response untouched", got, ok)
	}
}

// A key is whatever bytes the application makes it (idem scopes a
// client's key by its principal, which may be anything): binary bytes, a
// NUL, invalid UTF-8, quotes, lengths past any index's row, keys alike
// but for their last byte. Each is its own key; the empty key may be
// refused, but nothing panics.
func testKeysAnyBytes(t *testing.T, h KeysHarness) {
	k := h.open(t)
	long := strings.Repeat("k", 10_000)
	keys := []string{
		"\x00", "a", "a\x00", "a\x00b", "\xff\xfe\x00\x01", "\xc3\x28 invalid UTF-8",
		`'; DROP TABLE porch_idem_responses; --`, `"quoted"`, "line\nbreak",
		strings.Repeat("x", 255), strings.Repeat("x", 256), strings.Repeat("x", 257),
		strings.Repeat("x", 256) + "1", strings.Repeat("x", 256) + "2",
		long + "1", long + "2", long + "\x00",
	}
	noPanic(t, "the empty key", func() {
		ctx, cancel := keysCtx()
		defer cancel()
		r, err := k.st.Reserve(ctx, "")
		if err != nil {
			t.Logf("Reserve of the empty key refused: %v", err)
			return
		}
		defer r.Release()
		if _, _, err := r.Load(ctx); err != nil {
			t.Logf("Load of the empty key: %v", err)
		}
	})
	for i, key := range keys {
		noPanic(t, fmt.Sprintf("saving key %d (%.20q, %d bytes)", i, key, len(key)), func() {
			k.store(t, key, keysResponse(fmt.Sprint(i)), time.Hour)
		})
	}
	for i, key := range keys {
		noPanic(t, fmt.Sprintf("inspecting key %d", i), func() {
			got, ok := k.inspect(t, key)
			if !ok {
				t.Errorf("key %d (%.20q, %d bytes): Inspect finds none, want its response", i, key, len(key))
				return
			}
			if d := sameResponse(got, keysResponse(fmt.Sprint(i)), key); d != "" {
				t.Errorf("key %d (%.20q, %d bytes): %s (another key's response?)", i, key, len(key), d)
			}
		})
	}
}

// noPanic runs fn, failing t if it panics: a key from outside must never
// crash the process.
func noPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s: panicked: %v", what, p)
		}
	}()
	fn()
}
