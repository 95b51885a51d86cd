module github.com/writeonce/writeonce

go 1.26

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/mattn/go-sqlite3 v1.14.53
)

require github.com/google/uuid v1.6.0
