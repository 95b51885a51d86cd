//go:build cgo

package sqlite

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
)

// storedKeys is every idempotency key that may have a live row in
// porch_idem_responses, as a hash of the key and the row's expiry: read at
// open, and added to by each Save before its row is queued. The process
// that opened the file is its only writer (lockFile), and every row
// written is a Save's, so a key absent from it, or present only with an
// expiry that has passed, has no live row and Load may answer it without
// reading the database (an entry whose row has expired still sends Load to
// the row, which it prunes on access, until the entry is swept; the
// bounded prune deletes such rows anyway). A hash shared by two keys, a row deleted since
// (Forget, a prune) or a Save that failed leave an entry behind, which
// only costs that key a read. Expired entries are dropped once the set
// has doubled since the last sweep, so it holds about twice the live
// responses: 16 bytes and the map's overhead each.
//
// PostgreSQL has no such set: other instances save responses too, so an
// absent key proves nothing there.
type storedKeys struct {
	seed   maphash.Seed
	shards [storedShards]storedShard
}

const storedShards = 16

type storedShard struct {
	mu    sync.Mutex
	m     map[uint64]int64 // key hash → the latest expiry saved under it (store ms)
	swept int              // len(m) after the last sweep
}

func (k *storedKeys) init() {
	k.seed = maphash.MakeSeed()
	for i := range k.shards {
		k.shards[i].m = make(map[uint64]int64)
	}
}

func (k *storedKeys) shard(key string) (*storedShard, uint64) {
	h := maphash.String(k.seed, key)
	return &k.shards[h%storedShards], h
}

// add records that key may have a row live until expires (store ms).
// nowMS is the store's clock, for the sweep.
func (k *storedKeys) add(key string, expires, nowMS int64) {
	sh, h := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[h]; !ok || e < expires {
		sh.m[h] = expires
	}
	if len(sh.m) >= 2*max(sh.swept, 1024) {
		for x, e := range sh.m {
			if e <= nowMS {
				delete(sh.m, x)
			}
		}
		sh.swept = len(sh.m)
	}
}

// mayHave reports whether key may have a row: a live one, or an expired
// one not swept yet, for Load to prune on access.
func (k *storedKeys) mayHave(key string) bool {
	sh, h := k.shard(key)
	sh.mu.Lock()
	_, ok := sh.m[h]
	sh.mu.Unlock()
	return ok
}

// load reads the keys of every stored response, at open.
func (k *storedKeys) load(ctx context.Context, s *Store) error {
	k.init()
	rows, err := s.db.QueryContext(ctx, `SELECT key, expires_at FROM porch_idem_responses`)
	if err != nil {
		return fmt.Errorf("sqlite: read response keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var expires int64
		if err := rows.Scan(&key, &expires); err != nil {
			return fmt.Errorf("sqlite: read response keys: %w", err)
		}
		sh, h := k.shard(key)
		if e, ok := sh.m[h]; !ok || e < expires {
			sh.m[h] = expires
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: read response keys: %w", err)
	}
	for i := range k.shards {
		k.shards[i].swept = len(k.shards[i].m)
	}
	return nil
}
