package fulfillment

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/internal/platform/jobhold"
)

// beginForJob is beginForPayment for job's attempt: the transaction also
// holds job's own row (jobhold), so that what the job decides counts only
// on the server that gave it out. Without it, a worker that reached a
// former primary during a failover could find no order there and cancel
// its job as an unknown order, a decision that writes nothing and so
// commits without a standby, while River records the cancel on the new
// primary, leaving the event without an outcome.
func beginForJob(ctx context.Context, pool *pgxpool.Pool, job *rivertype.JobRow, provider string, ids []string) (pgx.Tx, error) {
	tx, err := beginForPayment(ctx, pool, provider, ids)
	if err != nil {
		return nil, err
	}
	if err := jobhold.LockTx(ctx, tx, job); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, err
	}
	return tx, nil
}
