// Package sqlite is porch's embedded store: one SQLite file in WAL mode,
// written by one process, whose limiters may therefore keep an exact count
// of their own keys in memory ([driver.ExclusiveCounters]). It needs cgo
// (github.com/mattn/go-sqlite3); a program that only uses PostgreSQL
// imports porch/store/postgres instead and links none of this. Built
// without cgo (CGO_ENABLED=0, or no C compiler), a program that imports it
// fails to compile with one error, a name that says so and names the
// stores that need no cgo: porch/store/memory and porch/store/postgres.
//
// [Open] takes an exclusive lock on the file for as long as the store is
// open, so a second process, or a second Open in this one by another name
// for the same file, fails with [ErrLocked] rather than multiplying every
// limit.
//
//	st, err := sqlite.Open("app.db", sqlite.Options{})
//	if err != nil { ... }
//	defer st.Close(context.Background())
//	createTables(st.DB()) // the application's own tables, same file
package sqlite
