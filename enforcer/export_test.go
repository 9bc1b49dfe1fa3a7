package enforcer

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Hook runs inside a fund_day job's transaction; an error aborts it.
type Hook = func(ctx context.Context, tx pgx.Tx, job *river.Job[FundDayArgs]) error

// SetHooks installs test hooks on s: afterPost runs after the debit and the
// Marquee update, before the job is completed; beforeCommit after the job
// is completed in the transaction, just before the commit.
func (s *Service) SetHooks(afterPost, beforeCommit Hook) {
	s.hooks = hooks{afterPost: afterPost, beforeCommit: beforeCommit}
}
