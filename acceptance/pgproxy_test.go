//go:build acceptance

package acceptance

import (
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgProxy is a TCP relay between storefronts and the PostgreSQL server that
// the gate can cut: cut closes every relayed connection and refuses new
// ones until restore, which is connection loss as a storefront sees it,
// without touching the server other legs share. Create it with
// startPGProxy; it is safe for concurrent use.
type pgProxy struct {
	ln      net.Listener
	network string // of the server: "tcp" or "unix"
	target  string

	mu    sync.Mutex // protects the fields below
	down  bool
	conns map[net.Conn]struct{}

	wg sync.WaitGroup // the accept loop and every relay goroutine
}

// startPGProxy relays a loopback port to the server dsn names and returns
// the proxy and dsn rewritten to go through it. The test's cleanup stops it.
func startPGProxy(t *testing.T, dsn string) (*pgProxy, string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	p := &pgProxy{network: "tcp", target: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))),
		conns: make(map[net.Conn]struct{})}
	if filepath.IsAbs(cfg.Host) { // a Unix socket directory
		p.network, p.target = "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)

	host, port, _ := net.SplitHostPort(p.ln.Addr().String())
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		u.Host = p.ln.Addr().String()
		return p, u.String()
	}
	return p, dsn + " host=" + host + " port=" + port // keyword/value form: the last one wins
}

func (p *pgProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.DialTimeout(p.network, p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			continue
		}
		p.wg.Go(func() { p.relay(c, s) })
		p.wg.Go(func() { p.relay(s, c) })
	}
}

// track registers a relayed pair, unless the proxy was cut meanwhile.
func (p *pgProxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		c.Close()
		s.Close()
		return false
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	return true
}

// relay copies until either side ends, then closes both.
func (p *pgProxy) relay(dst, src net.Conn) {
	io.Copy(dst, src) //nolint:errcheck // the end of a relay is the point
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// cut drops every relayed connection and refuses new ones.
func (p *pgProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
}

// restore relays new connections again.
func (p *pgProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

func (p *pgProxy) close() {
	p.ln.Close()
	p.cut()
	p.wg.Wait()
}
