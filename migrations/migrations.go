// Package migrations holds the schema of mountd as SQL files, applied in
// name order by bun's migrator. One set of files serves PostgreSQL and SQLite:
// instants are BIGINT Unix milliseconds in both, so equality and ordering
// mean the same everywhere, and the few dialect differences are template
// conditions on .Postgres.
package migrations

import (
	"embed"

	"github.com/uptrace/bun/migrate"
)

//go:embed *.sql
var files embed.FS

// Migrations lists every migration of the schema.
var Migrations = migrate.NewMigrations()

func init() {
	if err := Migrations.Discover(files); err != nil {
		panic(err)
	}
}
