package redis

// CounterKey is counterKey, for the external tests.
func (s *Store) CounterKey(key string) string { return s.counterKey(key) }
