package porch

import (
	"net"
	"net/http"
	"sync"
)

// limitListener caps the connections open at once. Accept takes a slot
// before it accepts, so a connection beyond the cap waits in the kernel's
// accept queue, holding none of the process's file descriptors, until one
// closes; the server's ConnState hook gives the slot back when a connection
// closes or is hijacked.
//
// This is golang.org/x/net/netutil.LimitListener with one difference: the
// accepted connection is not wrapped, so a TLS listener beneath still hands
// the server a *tls.Conn (which it needs to negotiate HTTP/2 and fill
// Request.TLS). It also saves taking on x/net, whose current release would
// raise the module's x/sys and x/text and add x/crypto and x/term, for 60
// lines.
type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	closeOnce sync.Once
	closed    chan struct{} // closed by Close, so a full Accept returns
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a free slot, then accepts.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return c, nil
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// chainConnState returns a ConnState hook that frees a slot when a
// connection ends, then calls next (the user's hook, if any).
func (l *limitListener) chainConnState(next func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			<-l.slots
		}
		if next != nil {
			next(c, s)
		}
	}
}
