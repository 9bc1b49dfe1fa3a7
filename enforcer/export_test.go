package enforcer

import (
	"context"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
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

// FundDays funds days as one batch, in the order given, as fund_day jobs
// that arrive together are (FundDay is a batch of one).
func (s *Service) FundDays(ctx context.Context, days ...FundDayArgs) ([]*FundResult, []error, error) {
	items := make([]fundItem, len(days))
	for i, a := range days {
		items[i] = fundItem{ctx: ctx, args: a}
	}
	return s.fundBatch(ctx, items)
}

// SweepDeadlocks is billing_enforcer_sweep_deadlocks_total: sweep batch
// transactions aborted as a deadlock's victim, by every test of the
// package (it only grows).
func SweepDeadlocks() float64 {
	var m dto.Metric
	if err := sweepDeadlocks.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
