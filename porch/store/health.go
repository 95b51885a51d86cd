package store

import (
	"errors"
	"time"
)

// ErrUnhealthy is returned by Store.Health, wrapping the reason, while the
// store cannot commit: its last commit failed, or none finished within
// HealthBudget.
var ErrUnhealthy = errors.New("store: cannot commit")

// Health check timing.
const (
	// HealthMaxAge is how old the committer's last outcome may be and still
	// answer Health. A store under load commits far more often than this,
	// so polling Health then costs no write at all.
	HealthMaxAge = time.Second
	// HealthBudget is how long Health waits for its probe's commit. A store
	// that cannot commit within it is unhealthy: its requests are waiting
	// at least that long too.
	HealthBudget = time.Second
)
