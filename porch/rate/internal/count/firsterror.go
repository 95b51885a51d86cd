package count

import "sync"

// firstError keeps the first non-nil error recorded from any goroutine: a
// Close that waits on many writes returns the first that failed.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) record(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
