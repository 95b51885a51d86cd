//go:build !cgo

package sqlite

// This build has cgo off (CGO_ENABLED=0, or no C compiler found), and the
// SQLite store is SQLite itself, a C library linked through cgo
// (github.com/mattn/go-sqlite3). Every other file of the package needs
// cgo and is left out, and the line below fails to compile on purpose:
// the name the compiler cannot find says what to do. Build with
// CGO_ENABLED=1 and a C compiler (gcc or clang), or use a store that needs
// no cgo: porch/store/memory (one process, nothing kept across a restart)
// or porch/store/postgres.
var _ = SQLite_needs_cgo__build_with_CGO_ENABLED_1_and_a_C_compiler__or_use_porch_store_memory_or_porch_store_postgres
