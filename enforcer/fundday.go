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

// QueueFunding is the River queue of fund_day jobs (jobs.QueueFunding).
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

// FundingKey is the wallet idempotency key of a Marquee's funding debit for
// day: at most one debit per Marquee per service day, ever.
func FundingKey(marqueeID int64, day string) string {
	return fmt.Sprintf("marquee:%d:%s:funding", marqueeID, day)
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

// FundDayTx funds args.MarqueeID for args.Day inside tx: claim the day
// (lock the Marquee and move paid_through to the end of the day, never
// back) unless it is already paid or the Marquee is stopped, then debit its
// daily price with the day's funding key. Lack of Sparks is not an error:
// the claim is undone, the Marquee marked unfunded and the result says
// insufficient. On any error the caller must roll tx back.
func (s *Service) FundDayTx(ctx context.Context, tx pgx.Tx, args FundDayArgs) (*FundResult, error) {
	start, end, err := DayBounds(args.Day, s.tz)
	if err != nil {
		return nil, err
	}
	now := s.now()
	res := &FundResult{MarqueeID: args.MarqueeID, Day: args.Day}
	c, err := claimDay(ctx, tx, args.MarqueeID, end, now)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return res, notDue(ctx, tx, res, end)
	}
	t, err := s.wallet.DebitTx(ctx, tx, wallet.PostParams{
		PlayerID:       c.playerID,
		Currency:       wallet.Sparks,
		Amount:         c.price,
		Kind:           wallet.KindFunding,
		Reference:      fmt.Sprintf("marquee:%d:%s", args.MarqueeID, args.Day),
		IdempotencyKey: FundingKey(args.MarqueeID, args.Day),
		Account:        wallet.AccountFundingRevenue,
	})
	if errors.Is(err, wallet.ErrInsufficientBalance) {
		// DebitTx ran under its own savepoint; undo the claim under ours.
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT enforcer_claim"); err != nil {
			return nil, fmt.Errorf("enforcer: undo claim: %w", err)
		}
		res.Outcome, res.Error = OutcomeInsufficient, err.Error()
		return res, markUnfunded(ctx, tx, args.MarqueeID, err.Error(), now)
	}
	if err != nil {
		return nil, fmt.Errorf("enforcer: fund marquee %d for %s: %w", args.MarqueeID, args.Day, err)
	}
	res.Outcome, res.TransactionID, res.PaidThrough, res.lag = OutcomeFunded, t.ID, &c.paidThrough, now.Sub(start)
	if t.Replayed {
		// The day's debit committed earlier (another path used the key):
		// success, without moving Sparks again.
		res.Outcome = OutcomeAlreadyPaid
	}
	return res, nil
}

// claim is a Marquee-day claimed for funding.
type claim struct {
	playerID    int64
	price       int64
	paidThrough time.Time
}

// claimDay locks a running Marquee that is not paid through end and moves
// paid_through there (GREATEST: never back; the trigger would refuse), in
// one statement under a savepoint, pipelined with it in one round trip; nil
// when the Marquee is not due. A concurrent claim of the same Marquee waits
// for the row and then, re-checking the WHERE on the committed row, finds
// nothing to do.
func claimDay(ctx context.Context, tx pgx.Tx, id int64, end, now time.Time) (*claim, error) {
	var c *claim
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT enforcer_claim")
	b.Queue(`UPDATE marquees SET paid_through = GREATEST(paid_through, $2), status = 'funded',
		last_funding_error = NULL, last_funded_at = $3, updated_at = $3
		WHERE id = $1 AND desired_state = 'running' AND (paid_through IS NULL OR paid_through < $2)
		RETURNING player_id, daily_price, paid_through`, id, end, now).QueryRow(func(row pgx.Row) error {
		var got claim
		err := row.Scan(&got.playerID, &got.price, &got.paidThrough)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		c = &got
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("enforcer: claim marquee %d: %w", id, err)
	}
	return c, nil
}

// notDue says why a Marquee could not be claimed: missing, already paid
// through end, or stopped. No lock is needed: paid_through never moves back.
func notDue(ctx context.Context, db DB, res *FundResult, end time.Time) error {
	m, err := scanMarquee(db.QueryRow(ctx, `SELECT `+marqueeColumns+` FROM marquees WHERE id = $1`, res.MarqueeID))
	if err != nil {
		return fmt.Errorf("%w: %d", err, res.MarqueeID)
	}
	res.PaidThrough = m.PaidThrough
	res.Outcome = OutcomeStopped
	if m.PaidThrough != nil && !m.PaidThrough.Before(end) {
		res.Outcome = OutcomeAlreadyPaid
	}
	return nil
}

// FundDay is FundDayTx in its own transaction, for operators and tests.
func (s *Service) FundDay(ctx context.Context, args FundDayArgs) (*FundResult, error) {
	var res *FundResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = s.FundDayTx(ctx, tx, args)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.observe()
	return res, nil
}

func markUnfunded(ctx context.Context, tx pgx.Tx, id int64, reason string, now time.Time) error {
	// A Marquee still inside a paid day (a failed prepayment) stays funded.
	_, err := tx.Exec(ctx, `UPDATE marquees SET last_funding_error = $2, updated_at = $3,
		status = CASE WHEN paid_through > $3 THEN status ELSE 'unfunded' END WHERE id = $1`, id, reason, now)
	if err != nil {
		return fmt.Errorf("enforcer: mark marquee %d unfunded: %w", id, err)
	}
	return nil
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
	res, err := w.svc.funder.Do(ctx, fundItem{ctx: ctx, job: job})
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

// fundAlone funds one job in its own transaction, completing it there: for
// a job whose Marquee already has another day in the same batch.
func (s *Service) fundAlone(ctx context.Context, job *river.Job[FundDayArgs]) (*FundResult, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("enforcer: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	res, err := s.FundDayTx(ctx, tx, job.Args)
	if err != nil {
		return nil, err
	}
	p := &planned{item: fundItem{ctx: ctx, job: job}, res: res, complete: true}
	if err := s.completeJobs(ctx, tx, []*planned{p}); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("enforcer: commit: %w", err)
	}
	res.observe()
	return res, nil
}
