package enforcer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/wallet"
)

// QueueFunding is the River queue of fund_day jobs; the worker process
// configures it as jobs.QueueFunding, an alias of this one.
const QueueFunding = "funding"

// FundDayArgs fund one Marquee for one service day.
type FundDayArgs struct {
	MarqueeID int64  `json:"marquee_id" river:"unique"`
	Day       string `json:"day" river:"unique"` // YYYY-MM-DD in the service-day time zone
}

// Kind implements river.JobArgs.
func (FundDayArgs) Kind() string { return "fund_day" }

// fundDayUniqueStates leave out completed (and cancelled, discarded): a day
// that completed unfunded for lack of Sparks must be enqueueable again by
// the next sweep after a top-up, while a queued, running or retrying job for
// the same (Marquee, day) is never duplicated. A completed funded day is not
// re-enqueued by sweeps (it is paid through), and when it is (the API's fund
// route), the worker's fast path and the wallet key keep it at one debit.
var fundDayUniqueStates = []rivertype.JobState{
	rivertype.JobStateAvailable,
	rivertype.JobStatePending,
	rivertype.JobStateRetryable,
	rivertype.JobStateRunning,
	rivertype.JobStateScheduled,
}

// InsertOpts implements river.JobArgsWithInsertOpts.
func (FundDayArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:      QueueFunding,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: fundDayUniqueStates},
	}
}

// EnqueueFundDayTx enqueues the fund_day job of marqueeID for the service
// day containing now, in the caller's transaction. A job already queued for
// that day is not duplicated (UniqueSkippedAsDuplicate in the result).
func EnqueueFundDayTx(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], marqueeID int64, now time.Time, tz *time.Location) (*rivertype.JobInsertResult, error) {
	res, err := client.InsertTx(ctx, tx, FundDayArgs{MarqueeID: marqueeID, Day: ServiceDay(now, tz)}, nil)
	if err != nil {
		return nil, fmt.Errorf("enforcer: enqueue fund_day: %w", err)
	}
	return res, nil
}

// Outcome is what funding a Marquee-day did.
type Outcome string

// Outcomes.
const (
	OutcomeFunded       Outcome = "funded"       // debited now
	OutcomeAlreadyPaid  Outcome = "already_paid" // paid_through already covered the day, or the debit was a replay
	OutcomeInsufficient Outcome = "insufficient" // not enough Sparks: marked unfunded, nothing debited
	OutcomeStopped      Outcome = "stopped"      // the Marquee should not run: nothing debited
	OutcomeNotDue       Outcome = "not_due"      // a day still to come whose previous day is unpaid: nothing debited
)

// FundResult is the outcome of one fund_day, also recorded as the River
// job's output.
type FundResult struct {
	MarqueeID     int64      `json:"marquee_id,string"`
	Day           string     `json:"day"`
	Outcome       Outcome    `json:"outcome"`
	TransactionID int64      `json:"transaction_id,string,omitempty"`
	PaidThrough   *time.Time `json:"paid_through,omitempty"`
	Error         string     `json:"error,omitempty"`
	lag           time.Duration
}

// observe counts a committed result.
func (r *FundResult) observe() {
	fundingsTotal.WithLabelValues(string(r.Outcome)).Inc()
	if r.Outcome == OutcomeFunded {
		fundingLag.Observe(max(r.lag, 0).Seconds())
	}
}

// FundDay funds args.MarqueeID for args.Day now, outside River (operators,
// the dev seed, tests): a batch of one through the same code as the
// fund_day jobs (fundbatch.go), in its own transaction. Lack of Sparks is
// not an error: the result says insufficient and the Marquee is marked
// unfunded.
func (s *Service) FundDay(ctx context.Context, args FundDayArgs) (*FundResult, error) {
	out, errs, err := s.fundBatch(ctx, []fundItem{{ctx: ctx, args: args}})
	if err != nil {
		return nil, err
	}
	if errs[0] != nil {
		return nil, errs[0]
	}
	return out[0], nil
}

// FundDayWorker works fund_day jobs: the funding and the job's completion
// commit in one transaction.
type FundDayWorker struct {
	river.WorkerDefaults[FundDayArgs]
	svc *Service
}

// Work implements river.Worker: the job joins the next batch of fund_day
// jobs (fundbatch.go), which funds and completes it in one transaction with
// the other jobs running at the same time.
func (w *FundDayWorker) Work(ctx context.Context, job *river.Job[FundDayArgs]) error {
	res, err := w.svc.funder.Do(ctx, fundItem{ctx: ctx, args: job.Args, job: job})
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalidDay), errors.Is(err, wallet.ErrIdempotencyKeyReused):
		return river.JobCancel(err) // retrying cannot help
	case err != nil:
		return err
	}
	if res.Outcome == OutcomeInsufficient {
		w.svc.logger.InfoContext(ctx, "marquee unfunded", "marquee_id", res.MarqueeID, "day", res.Day, "reason", res.Error)
	}
	return nil
}
