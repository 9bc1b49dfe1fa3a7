package webhook

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// OnClaimQueued sets a function each delivery calls once it has joined a
// claim batch.
func OnClaimQueued(o *Options, f func()) { o.hooks.queued = f }

// OnClaimBatch sets a function each claim batch calls with its deliveries'
// event ids before it runs.
func OnClaimBatch(o *Options, f func(eventIDs []string)) { o.hooks.batch = f }

// OnBeforeCommit sets a function each claim transaction calls just before
// its COMMIT, after its job inserts.
func OnBeforeCommit(o *Options, f func(ctx context.Context, tx pgx.Tx)) { o.hooks.beforeCommit = f }
