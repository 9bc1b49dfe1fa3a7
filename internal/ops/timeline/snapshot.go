package timeline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// beginner is a pool or a connection: what can open a transaction of its
// own (a pgx.Tx cannot, and is used as it is).
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// inSnapshot runs f in one read-only REPEATABLE READ transaction when db
// can open one, so that every statement of a timeline sees the same
// instant: a job completing between two reads never shows its wallet
// transaction without its payment. In the caller's transaction, f runs
// there.
func inSnapshot(ctx context.Context, db dbtx.DB, f func(dbtx.DB) (*Timeline, error)) (*Timeline, error) {
	b, ok := db.(beginner)
	if !ok {
		return f(db)
	}
	tx, err := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("timeline: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return f(tx)
}
