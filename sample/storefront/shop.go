package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/metrics/prom"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/shed"
	"github.com/writeonce/porch-go/porch/store"
)

// The shop's own tables live in the same database as porch's, SQLite or
// PostgreSQL; the SQL is written to run on both. The checkout writes exactly
// one orders row per executed request, which is what the gate counts to prove
// a side effect ran once.
const shopSchema = `
CREATE TABLE IF NOT EXISTS products (
	sku         TEXT    NOT NULL PRIMARY KEY,
	name        TEXT    NOT NULL,
	price_cents BIGINT  NOT NULL
);
CREATE TABLE IF NOT EXISTS orders (
	order_id     TEXT    NOT NULL PRIMARY KEY,
	sku          TEXT    NOT NULL REFERENCES products (sku),
	qty          BIGINT  NOT NULL,
	total_cents  BIGINT  NOT NULL,
	created_at   BIGINT  NOT NULL,
	operation_id TEXT
);
INSERT INTO products (sku, name, price_cents) VALUES
	('tea-green', 'Green tea, 100 g', 650),
	('tea-black', 'Black tea, 100 g', 550),
	('mug',       'Stoneware mug',    1800)
ON CONFLICT (sku) DO NOTHING;`

// maxCheckoutBody caps what the checkout handler reads. The idempotency
// middleware is given the same cap, so that it refuses a larger body with
// 413 before it reserves the key; otherwise the handler's refusal would be
// stored under the key and replayed to a retry with a body that fits.
const maxCheckoutBody = 64 << 10

type shop struct {
	cfg    config
	db     *sql.DB // reads; the checkout writes through idem.Exec
	st     stores  // porch's stores, whose write health /healthz reports
	health healthLog
}

type product struct {
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	PriceCents int64  `json:"price_cents"`
}

// newShop opens the store, builds the pool and middleware, and routes. If
// m is not nil, the pool, the store and both middlewares report to it.
// defaultMailbox is porch.PoolOptions.Mailbox's default, which a pool made
// with -mailbox 0 has; the committer's queue is sized by it.
const defaultMailbox = 1024

func newShop(cfg config, m *prom.Metrics) (*porch.App, error) {
	var (
		poolObs  porch.PoolObserver
		rateObs  rate.Observer
		idemObs  idem.Observer
		shedObs  shed.Observer
		storeObs store.Observer
	)
	if m != nil { // a nil *prom.Metrics in an interface would not be nil
		poolObs, rateObs, idemObs, shedObs, storeObs = m, m, m, m, m
	}
	pool := porch.NewPool(porch.PoolOptions{Size: cfg.pool, Mailbox: cfg.mailbox, Observer: poolObs})
	app := porch.New()
	// The committer holds one write for every job the mailboxes hold.
	mailbox := cfg.mailbox
	if mailbox == 0 {
		mailbox = defaultMailbox
	}
	st, err := openStores(cfg, app, pool.Size()*mailbox, storeObs)
	if err != nil {
		pool.Close(context.Background())
		return nil, err
	}
	// Closers run in reverse: the limiter's exact counts, then the pool's
	// last jobs, then the stores, which flush what they wrote.
	app.OnShutdown(pool.Close)
	// -rate-lease is the general limiter's only: a busy client's requests
	// are what a lease saves round trips on. The login limiter's keys see
	// a few failures per window, never busy enough to lease, and a lease
	// there would only let one instance's unanswered attempts refuse a
	// login on another.
	lim, err := rate.New(pool, st.counters, cfg.rateLimit, cfg.rateWindow,
		rate.Options{TrustProxy: cfg.trustProxy, WriteAhead: cfg.writeAhead(), Observer: rateObs,
			Algorithm: cfg.rateAlgorithm, Burst: cfg.rateBurst, Lease: cfg.rateLease})
	if err != nil {
		app.Close(context.Background())
		return nil, err
	}
	app.OnShutdown(lim.Close)
	logins, err := newLoginLimiter(cfg, pool, st.counters, rateObs) // login.go
	if err != nil {
		app.Close(context.Background())
		return nil, err
	}
	app.OnShutdown(logins.Close)
	conc := newInflight(cfg, pool, st.slots, m) // inflight.go; nil without -inflight-limit
	if conc != nil {
		app.OnShutdown(conc.Close)
	}
	// No principal: the shop has no accounts, so keys are scoped by the
	// connection's peer, even with -trust-proxy. Behind the proxy its
	// clients then share one scope, but a retry that arrives with another
	// forwarded address (a client that changed networks, the gate's retries
	// from fresh addresses) replays instead of ordering twice; a shop with
	// accounts would set Principal.
	keys := idem.New(pool, st.sql, idem.Options{RequireKey: true, TTL: cfg.idemTTL, MaxBody: maxCheckoutBody, Observer: idemObs})
	s := &shop{cfg: cfg, db: st.db, st: st}

	shedder := newShedder(cfg.shed, shedObs) // shed.go; nil with -max-inflight 0
	app.Get("/healthz", s.healthz)
	app.Group(func(r chi.Router) {
		if shedder != nil { // first: a request shed for load costs no store work
			r.Use(shedder.Handler)
		}
		if cfg.trustProxy {
			r.Use(middleware.ClientIPFromXFFTrustedProxies(1))
		}
		if cfg.noRateLimit { // a baseline for load runs, never for serving
			r.Get("/products", s.products)
			r.With(porch.Chain(keys)).Post("/checkout", s.checkout)
			r.With(readLogin).Post("/login", s.login)
			return
		}
		// Limit first: a refused request must not take an in-flight slot
		// nor reserve its key. Then the in-flight limiter (see
		// inflight.go), which a request it refuses never passes to
		// idempotency either.
		r.With(lim.Handler, conc.handler).Get("/products", s.reportSpan(s.products))
		r.With(porch.Chain(conc.after(lim, keys)...)).Post("/checkout", s.reportSpan(s.checkout))
		// The body first: the login limiter keys on its user.
		r.With(readLogin, porch.Chain(conc.after(rate.All(lim, logins))...)).Post("/login", s.login)
	})
	return app, nil
}

func (s *shop) products(w http.ResponseWriter, r *http.Request) {
	rows, err := s.db.QueryContext(r.Context(), `SELECT sku, name, price_cents FROM products ORDER BY sku`)
	if err != nil {
		serverError(w, err)
		return
	}
	defer rows.Close()
	list := []product{}
	for rows.Next() {
		var p product
		if err := rows.Scan(&p.SKU, &p.Name, &p.PriceCents); err != nil {
			serverError(w, err)
			return
		}
		list = append(list, p)
	}
	if err := rows.Err(); err != nil {
		serverError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

type order struct {
	OrderID     string `json:"order_id"`
	SKU         string `json:"sku"`
	Qty         int64  `json:"qty"`
	TotalCents  int64  `json:"total_cents"`
	OperationID string `json:"operation_id"` // idem.OperationID: the same for every retry of the key
}

func (s *shop) checkout(w http.ResponseWriter, r *http.Request) {
	req, bad := decodeCheckout(http.MaxBytesReader(w, r.Body, maxCheckoutBody))
	if bad != nil {
		bad.Write(w)
		return
	}
	if s.cfg.checkoutDelay > 0 { // the work a real checkout does before it commits
		select {
		case <-time.After(s.cfg.checkoutDelay):
		case <-r.Context().Done():
			// A 5xx, so that idempotency stores nothing and a retry runs
			// the checkout; returning silently would read as an empty 200.
			porch.Unavailable(problemBase+"cancelled", "the request ended before the order was placed", time.Second).Write(w)
			return
		}
	}
	var price int64
	err := s.db.QueryRowContext(r.Context(), `SELECT price_cents FROM products WHERE sku = $1`, req.SKU).Scan(&price)
	if errors.Is(err, sql.ErrNoRows) {
		porch.Problem{Type: problemBase + "unknown-sku", Title: "Unknown SKU", Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("no product has sku %q", req.SKU)}.Write(w)
		return
	}
	if err != nil {
		serverError(w, err)
		return
	}
	opID, _ := idem.OperationID(r.Context())
	o := order{OrderID: uuid.NewString(), SKU: req.SKU, Qty: req.Qty, TotalCents: price * req.Qty, OperationID: opID}
	// The order commits in the transaction that stores this response, or
	// not at all: no crash, failed save or lost database session can leave
	// an order without the stored answer that stops its retry ordering
	// again. A real payment call would pass opID as its idempotency key.
	if err := idem.Exec(r.Context(),
		`INSERT INTO orders (order_id, sku, qty, total_cents, created_at, operation_id) VALUES ($1, $2, $3, $4, $5, $6)`,
		o.OrderID, o.SKU, o.Qty, o.TotalCents, time.Now().UnixMilli(), o.OperationID); err != nil {
		serverError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, o)
}

const problemBase = "https://porch.dev/problems/storefront/"

// serverError logs err, without flooding the log when the database fails
// every request, and answers 503 with Retry-After, without err: internals
// stay in the log. Every error the shop's handlers can meet is the
// database failing (a dropped connection, a busy file), which a retry may
// get past; a 5xx also keeps idempotency from storing the answer.
func serverError(w http.ResponseWriter, err error) {
	if held, ok := serverErrors.admit(time.Now()); ok {
		slog.Error("storefront: request failed", "err", err, "suppressed", held)
	}
	porch.Unavailable(problemBase+"database-unavailable", "the database could not be reached; retry", time.Second).Write(w)
}

// serverErrors lets one "request failed" line through per second: a
// database that is down fails every request alike, and ten thousand lines
// a second would bury the first, the one that says why.
var serverErrors logSampler

// logSampler admits one line per second and counts the ones it held back.
type logSampler struct {
	mu   sync.Mutex // protects the fields below
	last time.Time
	held int
}

// admit reports whether a line may be logged at now, and how many were
// held back since the last one.
func (s *logSampler) admit(now time.Time) (held int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.last) < time.Second {
		s.held++
		return 0, false
	}
	held, s.held, s.last = s.held, 0, now
	return held, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		serverError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
