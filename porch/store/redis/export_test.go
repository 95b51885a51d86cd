package redis

// CounterKey is counterKey, for the external tests.
func (s *Store) CounterKey(key string) string { return s.counterKey(key) }

// DefaultPrefix is Options.Prefix's default, for the external tests that
// read porch's keys on a server of their own.
const DefaultPrefix = defaultPrefix
