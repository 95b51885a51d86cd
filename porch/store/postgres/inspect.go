package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/header"
)

// Inspect reads key's stored response in a transaction that takes key's
// lock without waiting: store.ErrKeyHeld while an owner on any instance
// holds it.
func (p *Store) Inspect(ctx context.Context, key string) (res driver.Response, ok bool, err error) {
	err = p.freeKeyTx(ctx, key, func(tx pgx.Tx) error {
		var created, expires int64
		var headers []byte
		err := tx.QueryRow(ctx, pgLoadResponse, dbKey(key)).
			Scan(&res.Digest, &res.Status, &res.ContentType, &res.Body, &created, &expires, &headers)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.Key, ok = key, true
		res.Created, res.Expires = time.UnixMilli(created), time.UnixMilli(expires)
		res.Header = header.Decode(headers)
		return nil
	})
	if err != nil {
		return driver.Response{}, false, fmt.Errorf("postgres: inspect: %w", err)
	}
	return res, ok, nil
}

// Forget deletes key's stored response in a transaction that takes key's
// lock without waiting, and returns once it has committed: store.ErrKeyHeld
// while an owner on any instance holds the key.
func (p *Store) Forget(ctx context.Context, key string) error {
	err := p.freeKeyTx(ctx, key, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, pgForgetResponse, dbKey(key))
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: forget: %w", err)
	}
	return nil
}

// freeKeyTx runs fn in a transaction on a key connection that holds key's
// lock, taken without waiting, and commits it, within Options.Timeout;
// store.ErrKeyHeld if an owner holds the lock. A support tool's call fails
// fast like an owner's (driver.ErrNoKeyConn) rather than queue behind the
// owners.
func (p *Store) freeKeyTx(ctx context.Context, key string, fn func(pgx.Tx) error) error {
	select {
	case p.slots <- struct{}{}:
	default:
		return driver.ErrNoKeyConn
	}
	defer func() { <-p.slots }()
	caller := ctx
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	late := func(err error) error {
		if caller.Err() != nil {
			return err // the caller's own end, not the store's failure
		}
		return p.late(ctx, "key", err)
	}
	conn, err := p.keys.Acquire(ctx)
	if err != nil {
		return late(err)
	}
	defer conn.Release() // pgxpool closes a connection left in a transaction
	err = pgx.BeginTxFunc(ctx, conn, readCommitted, func(tx pgx.Tx) error {
		var free bool
		if err := tx.QueryRow(ctx, pgTryLockKey, dbKey(key)).Scan(&free); err != nil {
			return err
		}
		if !free {
			return store.ErrKeyHeld
		}
		return fn(tx)
	})
	cancelAbandoned(ctx, conn)
	return late(err)
}
