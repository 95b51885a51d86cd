package porch

import (
	"container/list"
	"net"
	"net/http"
	"sync"
)

// limitListener caps the connections open at once. While a slot is free,
// Accept takes it before it accepts, so a connection beyond the cap waits in
// the kernel's accept queue, holding none of the process's file descriptors;
// the server's ConnState hook gives the slot back when a connection closes
// or is hijacked.
//
// A slot held by an idle keep-alive connection is not safe to wait for: a
// client that sends one request per IdleTimeout on each of MaxConns
// connections would keep every other client out for good. So when every
// slot is taken and some connection is idle (net/http's StateIdle: between
// requests, or reading the next request's header), Accept accepts the
// waiting client and closes the connection that has been idle longest,
// handing its slot over. A connection whose request is being handled is
// never closed; nor is one that has not finished its first request's header
// (or TLS handshake), since net/http reports an HTTP/2 connection in the
// same state, StateNew, for as long as it lives. ReadHeaderTimeout bounds
// those.
//
// This began as golang.org/x/net/netutil.LimitListener. Besides making room,
// it does not wrap the accepted connection, so a TLS listener beneath still
// hands the server a *tls.Conn (which it needs to negotiate HTTP/2 and fill
// Request.TLS). It also saves taking on x/net, whose current release would
// raise the module's x/sys and x/text and add x/crypto and x/term.
type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	closeOnce sync.Once
	closed    chan struct{} // closed by Close, so a full Accept returns

	mu       sync.Mutex                 // protects the fields below
	conns    map[net.Conn]*list.Element // each connection holding a slot: its element in idle, or nil
	idle     list.List                  // of the idle connections (net.Conn), longest idle first
	someIdle chan struct{}              // closed while idle is not empty
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{
		Listener: l,
		slots:    make(chan struct{}, n),
		closed:   make(chan struct{}),
		conns:    make(map[net.Conn]*list.Element),
		someIdle: make(chan struct{}),
	}
}

// Accept waits for a free slot, then accepts; or, once every slot is taken
// and some connection is idle, accepts and makes room for what it accepted.
// Making room only for a client already accepted keeps idle connections
// open while nobody is waiting for their slots.
func (l *limitListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	someIdle := l.someIdle
	l.mu.Unlock()
	select {
	case l.slots <- struct{}{}:
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		l.track(c)
		return c, nil
	case <-someIdle:
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := l.admit(c); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// admit gives c, accepted while every slot was taken, a slot: one that came
// free since, else the slot of the connection idle longest, which it closes.
// If neither is there (the idle connections took a request meanwhile), it
// waits for either, holding c: the one descriptor porch holds beyond the
// cap.
func (l *limitListener) admit(c net.Conn) error {
	for {
		select {
		case l.slots <- struct{}{}:
			l.track(c)
			return nil
		default:
		}
		victim, someIdle := l.handOver(c)
		if victim != nil {
			closeTransport(victim)
			return nil
		}
		select {
		case l.slots <- struct{}{}:
			l.track(c)
			return nil
		case <-someIdle:
		case <-l.closed:
			return net.ErrClosed
		}
	}
}

// handOver moves the slot of the connection idle longest to c and returns
// that connection, for the caller to close. With none idle, it returns nil
// and a channel closed once one is.
func (l *limitListener) handOver(c net.Conn) (victim net.Conn, someIdle <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.idle.Front()
	if e == nil {
		return nil, l.someIdle
	}
	victim = e.Value.(net.Conn)
	l.unidleLocked(e)
	delete(l.conns, victim) // its hooks from now on find nothing to do
	l.conns[c] = nil
	return victim, nil
}

// closeTransport closes c for good without writing to it: beneath a
// *tls.Conn it closes the TCP connection, since tls.Conn.Close first sends
// a close_notify alert, which can block the accept loop for up to 5 s on a
// client that reads nothing. An idle connection has no response to cut off.
func closeTransport(c net.Conn) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn()
	}
	c.Close() //nolint:errcheck // the server's own close reports nothing either
}

// track records c, which holds a slot, as open and not idle.
func (l *limitListener) track(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns[c] = nil
}

// setIdle records whether c is idle; idle connections queue at the back.
func (l *limitListener) setIdle(c net.Conn, idle bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[c]
	if !ok {
		return // closed to make room: its slot is another's now
	}
	if e != nil {
		l.unidleLocked(e)
		l.conns[c] = nil
	}
	if idle {
		if l.idle.Len() == 0 {
			close(l.someIdle)
		}
		l.conns[c] = l.idle.PushBack(c)
	}
}

// unidleLocked takes e off the idle queue.
func (l *limitListener) unidleLocked(e *list.Element) {
	l.idle.Remove(e)
	if l.idle.Len() == 0 {
		l.someIdle = make(chan struct{})
	}
}

// release gives c's slot back, unless c was closed to make room and its
// slot handed over already.
func (l *limitListener) release(c net.Conn) {
	l.mu.Lock()
	e, ok := l.conns[c]
	if ok {
		if e != nil {
			l.unidleLocked(e)
		}
		delete(l.conns, c)
	}
	l.mu.Unlock()
	if ok {
		<-l.slots
	}
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// chainConnState returns a ConnState hook that tracks which connections are
// idle and frees a slot when a connection ends, then calls next (the user's
// hook, if any).
func (l *limitListener) chainConnState(next func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateIdle:
			l.setIdle(c, true)
		case http.StateActive:
			l.setIdle(c, false)
		case http.StateClosed, http.StateHijacked:
			l.release(c)
		}
		if next != nil {
			next(c, s)
		}
	}
}
