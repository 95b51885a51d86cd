package postgres

import "crypto/sha256"

// A key is whatever bytes the application gives: a principal may hold
// invalid UTF-8 or a NUL, which a text column refuses, and be any length,
// beyond what a btree index row holds (about 2.7 KB). Keys are therefore
// stored as bytea, encoded by dbKey so that every key fits the index and
// two keys never share a row.
const (
	// maxRawKey is the longest key stored as its own bytes, readable in
	// the table as it is.
	maxRawKey = 256
	// hashedPrefix is how much of a longer key is kept readable in front
	// of its hash.
	hashedPrefix = maxRawKey - sha256.Size // 224
	// hashedMarker ends an encoded long key, making it maxRawKey+1 bytes
	// long: a length no raw key has, so a long key's encoding never equals
	// a short key's, and two long keys' are equal only if their SHA-256s
	// are.
	hashedMarker = 0x01
)

// dbKey is key as stored in the key columns and passed to every statement
// that names a key: key's bytes up to maxRawKey, else its first
// hashedPrefix bytes, its SHA-256 and hashedMarker. It is injective (up to
// SHA-256 collisions), so keys count apart exactly as they do on SQLite.
func dbKey(key string) []byte {
	if len(key) <= maxRawKey {
		return []byte(key)
	}
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, 0, maxRawKey+1)
	b = append(b, key[:hashedPrefix]...)
	b = append(b, sum[:]...)
	return append(b, hashedMarker)
}
