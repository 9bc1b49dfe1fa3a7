// Package dbtx declares DB, the one interface every package's SQL runs
// against: what a *pgxpool.Pool, a *pgx.Conn and a pgx.Tx all offer, so a
// function taking a DB runs in the caller's transaction or on its own.
package dbtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
