//go:build acceptance

package acceptance

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// Issue 16's boundary and parallel legs on PostgreSQL, two instances
// sharing one schema. The sliding and gcra legs depend on the PostgreSQL
// driver's statements for those algorithms: until it has them the
// storefront refuses to start with driver.ErrAlgorithm, and the legs skip
// saying so (skipPendingAlgorithm), so that acceptance.sh's last line
// names them.

// skipPendingAlgorithm starts one storefront on dsn with flags and skips
// the test if it exits because the PostgreSQL driver does not implement
// the flags' algorithm yet; if it starts, it is stopped again (SIGTERM,
// exit 0) and the leg runs. Any other failure to start fails the test.
func skipPendingAlgorithm(t *testing.T, dsn string, flags ...string) {
	t.Helper()
	args := append([]string{"-addr", "127.0.0.1:0", "-db", newDB(t), "-postgres", dsn}, flags...)
	s := &storefront{
		cmd:    exec.Command(storefrontBin, args...),
		exited: make(chan struct{}),
		stdout: &stdoutWatcher{addr: make(chan string, 1)},
		stderr: &syncBuffer{},
		client: newClient(),
	}
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start storefront: %v", err)
	}
	go func() { // joined below, in every branch
		s.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		close(s.exited)
	}()
	select {
	case <-s.stdout.addr:
		s.stop(t)
	case <-s.exited:
		if strings.Contains(s.stderr.String(), driver.ErrAlgorithm.Error()) {
			t.Skipf("pending: the PostgreSQL driver has no statements for %s yet (driver.ErrAlgorithm)", strings.Join(flags, " "))
		}
		t.Fatalf("storefront %s exited before listening: %v\n%s", strings.Join(flags, " "), s.cmd.ProcessState, s.output())
	case <-time.After(startTimeout):
		s.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // it may exit on its own meanwhile
		<-s.exited
		t.Fatalf("storefront %s: neither listening nor exited within %s\n%s", strings.Join(flags, " "), startTimeout, s.output())
	}
}

// The boundary schedule over two instances: the first burst on one, the
// second on the other, as a client behind a load balancer would send it.
// Not parallel, as TestAlgorithmBoundaryBurst is not.
func TestPostgresAlgorithmBoundaryBurst(t *testing.T) {
	for _, alg := range []string{"fixed", "sliding", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			flags := algFlags(alg, boundaryLimit, boundaryWindow, boundaryLimit)
			dsn := legDSN(t)
			skipPendingAlgorithm(t, dsn, flags...) // sliding, gcra: pending the driver's statements
			a, b := startPair(t, dsn, flags...)
			checkBoundary(t, alg, boundaryBurst(t, a, b, boundaryLimit))
		})
	}
}

// A parallel burst alternating over two instances, one client at limit 100
// per hour (GCRA: burst 100): exactly 100 served in all.
func TestPostgresAlgorithmConcurrentExact(t *testing.T) {
	t.Parallel()
	const limit, burst, window = 100, 300, time.Hour
	for _, alg := range []string{"sliding", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			flags := algFlags(alg, limit, window, limit)
			dsn := legDSN(t)
			skipPendingAlgorithm(t, dsn, flags...) // pending the driver's statements
			a, b := startPair(t, dsn, flags...)
			concurrentExact(t, alg, limit, burst, a, b)
		})
	}
}
