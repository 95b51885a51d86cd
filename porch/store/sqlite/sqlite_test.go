package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

func TestReopen(t *testing.T) {
	path := dbPath(t)
	s := openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	mustSaveCounter(t, s, driver.Counter{Key: "k", State: driver.State{Start: s.Now(), Count: 9}, Window: time.Hour})
	closeStore(t, s)

	// A second open must find the schema current and the row intact.
	s = openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	if got, _, ok := counterRow(t, s.DB(), "k"); !ok || got != 9 {
		t.Errorf("after reopen: got count %d (row %v), want 9", got, ok)
	}
	mustSaveCounter(t, s, driver.Counter{Key: "k", State: driver.State{Start: s.Now(), Count: 10}, Window: time.Hour})
	closeStore(t, s)
	s = openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	if got, _, _ := counterRow(t, s.DB(), "k"); got != 10 {
		t.Errorf("after second reopen: got count %d, want 10", got)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := dbPath(t)
	s := openSQLite(t, path, sqlite.Options{})
	execSQL(t, s.DB(), `PRAGMA user_version = 1000`)
	closeStore(t, s)
	if s, err := sqlite.Open(path, sqlite.Options{}); err == nil {
		s.Close(context.Background())
		t.Fatal("got a store over a schema from a newer build, want an error")
	}
}

func TestLoadCounters(t *testing.T) {
	clock := fakeClock()
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: clock, PruneRows: -1}})
	start := s.Now()
	for _, c := range []driver.Counter{
		{Key: "closed", State: driver.State{Start: start.Add(-2 * time.Minute), Count: 4}, Window: time.Minute},
		{Key: "closes-now", State: driver.State{Start: start.Add(-time.Minute), Count: 5}, Window: time.Minute},
		{Key: "open", State: driver.State{Start: start.Add(-30 * time.Second), Count: 6}, Window: time.Minute},
	} {
		mustSaveCounter(t, s, c)
	}

	var got []driver.Counter
	if err := s.LoadCounters(context.Background(), start, func(c driver.Counter) { got = append(got, c) }); err != nil {
		t.Fatal(err)
	}
	want := []driver.Counter{{Key: "open", State: driver.State{Start: start.Add(-30 * time.Second), Count: 6}, Window: time.Minute}}
	if len(got) != 1 || got[0].Key != want[0].Key || !got[0].Start.Equal(want[0].Start) ||
		got[0].Window != want[0].Window || got[0].Count != want[0].Count {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestCounterEnd(t *testing.T) {
	c := driver.Counter{State: driver.State{Start: wall0}, Window: time.Minute}
	if got, want := c.End(), wall0.Add(time.Minute); !got.Equal(want) {
		t.Errorf("got End %v, want %v", got, want)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	now := s.Now()
	want := driver.Response{
		Key:         "idem:0::abc",
		Digest:      bytes.Repeat([]byte{0xab}, 32),
		Status:      201,
		ContentType: "application/json",
		Body:        []byte(`{"order":1}` + "\x00\xff"),
		Header:      http.Header{"Location": {"/orders/1"}, "Link": {"<a>", "<b>"}},
		Created:     now,
		Expires:     now.Add(time.Hour),
	}
	save := func(r driver.Response) {
		t.Helper()
		done := make(chan error, 1)
		if err := s.SaveResponse(r, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("save response: %v", err)
		}
	}
	save(want)

	got, ok, err := s.LoadResponse(context.Background(), want.Key)
	if err != nil || !ok {
		t.Fatalf("got LoadResponse = (ok %v, err %v), want the stored response", ok, err)
	}
	if !equalResponse(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}

	_, ok, err = s.LoadResponse(context.Background(), "idem:0::missing")
	if err != nil || ok {
		t.Errorf("got LoadResponse(missing) = (ok %v, err %v), want (false, nil)", ok, err)
	}

	// Saving again for the key replaces the row.
	replaced := want
	replaced.Status, replaced.Body, replaced.Header = 200, []byte("second"), nil
	save(replaced)
	if got, _, _ := s.LoadResponse(context.Background(), want.Key); !equalResponse(got, replaced) {
		t.Errorf("after a second save: got %+v, want %+v", got, replaced)
	}
}

func TestDeleteResponseOnlyWhenExpired(t *testing.T) {
	tests := []struct {
		name      string
		at        time.Duration // DeleteResponse's now, from Created
		wantFound bool
	}{
		{"live row is kept", 59 * time.Minute, true},
		{"row expiring now is pruned", time.Hour, false},
		{"expired row is pruned", 2 * time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock(), PruneRows: -1}})
			now := s.Now()
			r := driver.Response{Key: "k", Digest: []byte{1}, Status: 200, Body: []byte("ok"), Created: now, Expires: now.Add(time.Hour)}
			done := make(chan error, 1)
			if err := s.SaveResponse(r, func(err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteResponse("k", now.Add(tt.at), func(err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("delete: %v", err)
			}
			_, found, err := s.LoadResponse(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if found != tt.wantFound {
				t.Errorf("got row found %v, want %v", found, tt.wantFound)
			}
		})
	}
}

func TestReservation(t *testing.T) {
	clock := fakeClock()
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: clock, PruneRows: -1}})
	ctx := context.Background()
	res, err := s.Reserve(ctx, "idem:k")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()

	if _, ok, err := res.Load(ctx); ok || err != nil {
		t.Fatalf("got Load before Save = (ok %v, err %v), want (false, nil)", ok, err)
	}
	saved := driver.Response{Digest: []byte{7}, Status: 201, ContentType: "text/plain", Body: []byte("made")}
	if err := res.Save(ctx, saved, time.Minute); err != nil {
		t.Fatalf("save: %v", err)
	}
	want := saved
	want.Key, want.Created, want.Expires = "idem:k", wall0, wall0.Add(time.Minute)
	if _, _, err := res.Load(ctx); !errors.Is(err, driver.ErrReleased) {
		t.Errorf("got Load after Save = %v, want driver.ErrReleased (Save ended the reservation)", err)
	}
	// Save ended res; the next owner reads what it stored.
	res, err = s.Reserve(ctx, "idem:k")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	got, ok, err := res.Load(ctx)
	if err != nil || !ok || !equalResponse(got, want) {
		t.Errorf("got Load = (%+v, %v, %v), want (%+v, true, nil)", got, ok, err, want)
	}
	// Save returns once the row is durable: it is in the table already.
	if got, ok, _ := s.LoadResponse(ctx, "idem:k"); !ok || !equalResponse(got, want) {
		t.Errorf("got the row %+v (found %v), want %+v", got, ok, want)
	}

	clock.Advance(time.Minute)
	if _, ok, err := res.Load(ctx); ok || err != nil {
		t.Errorf("got Load of an expired response = (ok %v, err %v), want (false, nil)", ok, err)
	}
	res.Release()
	res.Release() // safe to call twice

	// The expired row was pruned on that access (the prune is queued, so
	// wait for a later write to commit behind it).
	mustSaveCounter(t, s, driver.Counter{Key: "barrier", State: driver.State{Start: s.Now(), Count: 1}, Window: time.Minute})
	if _, ok, _ := s.LoadResponse(ctx, "idem:k"); ok {
		t.Error("got the expired row still stored, want it pruned on access")
	}
}

func TestSaveResponseEmptyBody(t *testing.T) {
	s := openSQLite(t, dbPath(t), sqlite.Options{Options: store.Options{Clock: fakeClock()}})
	ctx := context.Background()

	done := make(chan error, 1)
	r := driver.Response{Key: "direct", Digest: []byte{1}, Status: 204, Created: s.Now(), Expires: s.Now().Add(time.Hour)}
	if err := s.SaveResponse(r, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("got SaveResponse(empty body) = %v, want nil", err)
	}

	res, err := s.Reserve(ctx, "reserved")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if err := res.Save(ctx, driver.Response{Digest: []byte{1}, Status: 204}, time.Hour); err != nil {
		t.Errorf("got Reservation.Save(empty body) = %v, want nil", err)
	}
	// Save ended res; the next owner reads what it stored.
	next, err := s.Reserve(ctx, "reserved")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release()
	got, ok, err := next.Load(ctx)
	if err != nil || !ok || got.Status != 204 || len(got.Body) != 0 {
		t.Errorf("got Load = (%+v, %v, %v), want the stored 204 with no body", got, ok, err)
	}
}

func equalResponse(a, b driver.Response) bool {
	return a.Key == b.Key && bytes.Equal(a.Digest, b.Digest) && a.Status == b.Status &&
		a.ContentType == b.ContentType && bytes.Equal(a.Body, b.Body) && reflect.DeepEqual(a.Header, b.Header) &&
		a.Created.Equal(b.Created) && a.Expires.Equal(b.Expires)
}

func TestTimelineSurvivesReopen(t *testing.T) {
	tests := []struct {
		name     string
		persist  time.Duration // window start persisted, from the wall clock
		wantNow  time.Duration // s.Now() after reopen, from the same wall clock
		response bool          // persist a stored response's Created instead
	}{
		{"persisted window start in the past", -time.Hour, 0, false},
		{"persisted window start ahead of the wall clock", time.Hour, time.Hour, false},
		{"persisted response ahead of the wall clock", 2 * time.Hour, 2 * time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := dbPath(t)
			s := openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: fakeClock(), PruneRows: -1}})
			at := wall0.Add(tt.persist)
			if tt.response {
				done := make(chan error, 1)
				r := driver.Response{Key: "k", Digest: []byte{1}, Status: 200, Body: []byte("ok"), Created: at, Expires: at.Add(time.Hour)}
				if err := s.SaveResponse(r, func(err error) { done <- err }); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else {
				mustSaveCounter(t, s, driver.Counter{Key: "k", State: driver.State{Start: at, Count: 1}, Window: time.Minute})
			}
			closeStore(t, s)

			// The wall clock reads wall0 again: as if it had been set back.
			clock := fakeClock()
			s = openSQLite(t, path, sqlite.Options{Options: store.Options{Clock: clock}})
			if got, want := s.Now(), wall0.Add(tt.wantNow); !got.Equal(want) {
				t.Errorf("got Now %v, want %v", got, want)
			}
			if got := s.Wall(); !got.Equal(wall0) {
				t.Errorf("got Wall %v, want the wall clock %v", got, wall0)
			}
			clock.Advance(time.Second)
			if got, want := s.Now(), wall0.Add(tt.wantNow+time.Second); !got.Equal(want) {
				t.Errorf("a second later: got Now %v, want %v", got, want)
			}
		})
	}
}

func TestOpenSQLiteAnyPath(t *testing.T) {
	tests := []struct{ name, file string }{
		{"plain", "porch.db"},
		{"space", "my porch.db"},
		{"hash", "porch#2.db"},
		{"question mark", "porch?.db"},
		{"percent", "porch%41.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tt.file)
			s, err := sqlite.Open(path, sqlite.Options{})
			if err != nil {
				t.Fatalf("open %q: %v", path, err)
			}
			mustSaveCounter(t, s, driver.Counter{Key: "k", State: driver.State{Start: s.Now(), Count: 1}, Window: time.Hour})
			closeStore(t, s)
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Contains(names, tt.file) {
				t.Errorf("got files %q in the directory, want %q", names, tt.file)
			}
		})
	}
}
