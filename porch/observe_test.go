package porch_test

import (
	"time"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/fail"
	"github.com/writeonce/porch-go/porch/porchtest"
)

func TestPoolObserverCountsOnlySendsRefusedForSaturation(t *testing.T) {
	obs := &porchtest.Observer{}
	pub := porch.NewPool(porch.PoolOptions{Size: 1, Mailbox: 1, Observer: obs})
	t.Cleanup(func() { pub.Close(context.Background()) })
	p := actor.Of(pub)
	release := blockActor(t, p, "k")
	if err := p.Send("k", func(int) {}); err != nil {
		t.Fatalf("send into a mailbox with room: %v", err)
	}
	for range 3 {
		if err := p.Send("k", func(int) {}); !errors.Is(err, porch.ErrSaturated) {
			t.Fatalf("send into a full mailbox: got %v, want ErrSaturated", err)
		}
	}
	// A timer's shard job refused is not a request refused.
	if err := p.SendShard(0, false, func(int) {}); !errors.Is(err, porch.ErrSaturated) {
		t.Fatalf("SendShard into a full mailbox: got %v, want ErrSaturated", err)
	}
	if got, want := obs.Rejected(), 3; got != want {
		t.Errorf("got %d rejections observed, want %d", got, want)
	}
	release()
}

// blockActor parks key's actor on a job until release is called (also at
// cleanup); when it returns, the actor is inside that job and its mailbox
// is empty.
func blockActor(t *testing.T, p *actor.Pool, key string) (release func()) {
	t.Helper()
	started, unblock := make(chan struct{}), make(chan struct{})
	if err := p.Send(key, func(int) { close(started); <-unblock }); err != nil {
		t.Fatalf("send blocking job: %v", err)
	}
	<-started
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	return release
}

// logLines decodes the JSON lines buf holds.
func logLines(t *testing.T, buf *porchtest.LogBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(strings.NewReader(buf.String()))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("read log: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// failing fails every request closed, logging "porch: could not " + what.
// The process's error log lets one line of a kind through per interval, so
// a test that runs again (-count) needs a kind of its own.
type failing struct{ what string }

func (f failing) Before(r *http.Request) (*http.Request, *porch.Response) {
	return r, porch.Unavailable("about:blank", fail.Detail(nil, r, f.what, errors.New("disk on fire")), time.Second)
}
func (failing) After(*http.Request, *porch.Response, porch.Completion) {}

var failingRuns atomic.Int64

func TestAppLoggerGetsRequestLogsWithTheRequestID(t *testing.T) {
	var buf porchtest.LogBuffer
	app := porch.New()
	app.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	app.Use(middleware.RequestID)
	app.With(porch.Chain(holder{new(porch.Completion)})).Get("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	what := fmt.Sprintf("do its work (run %d)", failingRuns.Add(1))
	app.With(porch.Chain(failing{what})).Get("/fail", func(http.ResponseWriter, *http.Request) {})
	s := serveApp(t, app)
	for _, path := range []string{"/panic", "/fail"} {
		res, err := http.Get("http://" + s.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	want := map[string]bool{"porch: panic": false, "porch: could not " + what: false}
	for _, l := range logLines(t, &buf) {
		msg, _ := l["msg"].(string)
		if _, ok := want[msg]; !ok {
			continue
		}
		want[msg] = true
		if id, _ := l["request_id"].(string); !strings.Contains(id, "-") {
			t.Errorf("%q: got request_id %q, want chi's middleware.RequestID value", msg, id)
		}
	}
	for msg, seen := range want {
		if !seen {
			t.Errorf("%q: not in App.Logger's output", msg)
		}
	}
}
