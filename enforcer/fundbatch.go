package enforcer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/rivercomplete"
	"github.com/fibe-dev/billing/wallet"
)

// Group commit of fund_day jobs, and the only way funding is done (FundDay
// is a batch of one). After midnight a sweep enqueues one job per Marquee
// and the workers pick them up by the dozen; funding each in its own
// transaction costs six round trips and a WAL flush per Marquee. Instead
// the jobs that are running at the same time are funded together, in one
// transaction: lock their Marquees (one statement), debit their owners
// (wallet.PostManyTx: one lookup and one set-based statement), move paid_through or
// record the refusal (one statement), complete the jobs (rivercomplete),
// one commit. Every job is still its own River job, unique by (Marquee,
// day), with its own wallet key, and is completed in the transaction that
// debits it; a failed batch fails each of its jobs, which River retries.

// Batch defaults: DefaultFundBatch caps the jobs of one transaction;
// fundBatchTimeout bounds it (the jobs' own timeouts only end their wait).
const (
	DefaultFundBatch = 64
	fundBatchTimeout = 30 * time.Second
)

// fundItem is a Marquee-day waiting for its batch: a running fund_day job,
// or FundDay's call (job nil: nothing to complete).
type fundItem struct {
	ctx  context.Context // the job's work context: River's client, the job's output
	args FundDayArgs
	job  *river.Job[FundDayArgs]
}

// planned is one job of a batch on its way through it.
type planned struct {
	idx      int // in the batch's items
	item     fundItem
	res      *FundResult
	start    time.Time // the day's bounds in the service-day time zone
	end      time.Time
	post     int // index in the batch's posts, or -1 when nothing is debited
	err      error
	marquee  *lockedMarquee
	complete bool // the job's result is final and it completes in the batch
}

// lockedMarquee is a Marquee row locked by the batch.
type lockedMarquee struct {
	playerID    int64
	price       int64
	plan        string
	running     bool
	paidThrough *time.Time
}

// fundBatch funds items in one transaction. Jobs whose Marquee already has
// a job in the batch (another day of it) are funded after it, each in a
// batch of one; unparsable days fail without a transaction.
func (s *Service) fundBatch(ctx context.Context, items []fundItem) ([]*FundResult, []error, error) {
	ctx, cancel := context.WithTimeout(ctx, fundBatchTimeout)
	defer cancel()
	plans, alone, failed := s.plan(items)
	if len(plans) > 0 {
		if err := s.fundTogether(ctx, plans); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range alone {
		if err := s.fundTogether(ctx, []*planned{p}); err != nil {
			p.err = err
		}
	}
	out, errs := make([]*FundResult, len(items)), make([]error, len(items))
	for _, p := range slices.Concat(plans, alone, failed) {
		out[p.idx], errs[p.idx] = p.res, p.err
	}
	return out, errs, nil
}

// plan orders the batch by Marquee (the lock order), then by day, and
// sets aside unparsable days (failed). A Marquee's earliest day joins the
// shared transaction; its later days (alone) are funded after it, each on
// its own, in day order. Whatever order the jobs arrived in, no day is
// then funded before an earlier one of the same batch, which would find
// paid_through covering it and take it as already paid.
func (s *Service) plan(items []fundItem) (together, alone, failed []*planned) {
	var valid []*planned
	for i, it := range items {
		p := &planned{idx: i, item: it, post: -1, res: &FundResult{MarqueeID: it.args.MarqueeID, Day: it.args.Day}}
		p.start, p.end, p.err = DayBounds(it.args.Day, s.tz)
		p.res.lag = s.now().Sub(p.start)
		if p.err != nil {
			failed = append(failed, p)
			continue
		}
		valid = append(valid, p)
	}
	slices.SortStableFunc(valid, func(a, b *planned) int {
		return cmp.Or(cmp.Compare(a.res.MarqueeID, b.res.MarqueeID), a.end.Compare(b.end))
	})
	for i, p := range valid {
		if i > 0 && valid[i-1].res.MarqueeID == p.res.MarqueeID {
			alone = append(alone, p)
		} else {
			together = append(together, p)
		}
	}
	return together, alone, failed
}

// fundTogether runs the shared transaction. An error fails the whole batch.
func (s *Service) fundTogether(ctx context.Context, plans []*planned) error {
	tx, err := lockMarquees(ctx, s.pool, plans)
	if tx != nil {
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	}
	if err != nil {
		return err
	}
	now := s.now()
	// One batch carries, after the debits, the low-balance judgement of
	// the players they moved, the Marquees' new paid_through and the
	// funding events: one round trip.
	b := &pgx.Batch{}
	told, err := s.debit(ctx, tx, plans, now, b)
	if err != nil {
		return err
	}
	if err := recordFunding(ctx, tx, plans, now, b, told); err != nil {
		return err
	}
	if err := s.completeJobs(ctx, tx, plans); err != nil {
		return err
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return fmt.Errorf("enforcer: commit batch: %w", err)
	}
	fundBatchSize.Observe(float64(len(plans)))
	for _, p := range plans {
		if p.complete {
			p.res.observe()
		}
	}
	return nil
}

// lockMarquees begins the batch's transaction and, in the same round trip
// (pgx's Batch.BeginTx), locks its Marquees in id order and reads them; a
// missing one fails its job with ErrNotFound.
func lockMarquees(ctx context.Context, pool *pgxpool.Pool, plans []*planned) (pgx.Tx, error) {
	ids := make([]int64, len(plans))
	for i, p := range plans {
		ids[i] = p.res.MarqueeID
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(`SELECT id, player_id, daily_price, plan, desired_state = 'running', paid_through
		FROM marquees WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	br := pool.SendBatch(ctx, b)
	tx := br.Tx()
	found, err := readLocked(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return tx, fmt.Errorf("enforcer: lock marquees: %w", err)
	}
	for _, p := range plans {
		if p.marquee = found[p.res.MarqueeID]; p.marquee == nil {
			p.err = fmt.Errorf("%w: %d", ErrNotFound, p.res.MarqueeID)
		}
	}
	return tx, nil
}

// readLocked reads the BEGIN and the locked Marquees, by id.
func readLocked(br pgx.BatchResults) (map[int64]*lockedMarquee, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	found := map[int64]*lockedMarquee{}
	var id int64
	var m lockedMarquee
	_, err = pgx.ForEachRow(rows, []any{&id, &m.playerID, &m.price, &m.plan, &m.running, &m.paidThrough}, func() error {
		cp := m
		found[id] = &cp
		return nil
	})
	return found, err
}

// debit decides each job (stopped, already paid, not yet due, or due) and
// debits the due ones with their day's funding key. The wallet's observer
// is queued on b (wallet.PostBatchQueuedTx); told finishes it once b is
// sent.
func (s *Service) debit(ctx context.Context, tx pgx.Tx, plans []*planned, now time.Time, b *pgx.Batch) (told func(context.Context) error, err error) {
	var posts []wallet.PostParams
	for _, p := range plans {
		m := p.marquee
		switch {
		case p.err != nil:
			continue
		case !m.running:
			p.res.Outcome, p.res.PaidThrough, p.complete = OutcomeStopped, m.paidThrough, true
		case m.paidThrough != nil && !m.paidThrough.Before(p.end):
			p.res.Outcome, p.res.PaidThrough, p.complete = OutcomeAlreadyPaid, m.paidThrough, true
		case aheadOfUnpaid(m.paidThrough, p.start, now):
			p.res.Outcome, p.res.PaidThrough, p.complete = OutcomeNotDue, m.paidThrough, true
		default:
			p.post = len(posts)
			posts = append(posts, wallet.PostParams{PlayerID: m.playerID, Currency: wallet.Sparks, Amount: m.price,
				Direction: wallet.Debit, Kind: wallet.KindFunding, Account: wallet.AccountFundingRevenue,
				Reference:      fmt.Sprintf("marquee:%d:%s", p.res.MarqueeID, p.res.Day),
				IdempotencyKey: wallet.FundingKey(p.res.MarqueeID, p.res.Day)})
		}
	}
	if len(posts) == 0 {
		return func(context.Context) error { return nil }, nil
	}
	out, errs, told, err := s.wallet.PostBatchQueuedTx(ctx, tx, posts, b)
	if err != nil {
		return nil, fmt.Errorf("enforcer: debit batch: %w", err)
	}
	for _, p := range plans {
		if p.post < 0 {
			continue
		}
		t, err := out[p.post], errs[p.post]
		switch {
		case errors.Is(err, wallet.ErrInsufficientBalance):
			p.res.Outcome, p.res.Error, p.complete = OutcomeInsufficient, err.Error(), true
		case err != nil:
			p.err = fmt.Errorf("enforcer: fund marquee %d for %s: %w", p.res.MarqueeID, p.res.Day, err)
		case t.Replayed:
			// The day's debit committed earlier: success, no Sparks moved.
			p.res.Outcome, p.res.TransactionID, p.complete = OutcomeAlreadyPaid, t.ID, true
		default:
			p.res.Outcome, p.res.TransactionID, p.complete = OutcomeFunded, t.ID, true
		}
	}
	return told, nil
}

// recordFunding moves paid_through of the debited Marquees to the end of
// their day (GREATEST: never back) and marks the refused ones unfunded (a
// Marquee still inside a paid day stays funded), in one statement, and
// writes the funding events (emitFunding) in the same round trip as the
// low-balance judgement debit queued on b (told finishes it). The new
// paid_through is known before the statement runs (each row is locked
// since lockMarquees read it), so the events need not wait for it; the
// statement's answer is checked against it.
func recordFunding(ctx context.Context, tx pgx.Tx, plans []*planned, now time.Time, b *pgx.Batch, told func(context.Context) error) error {
	var ids []int64
	var ends []time.Time
	var paid []bool
	var reasons []*string
	want := map[int64]time.Time{}
	for _, p := range plans {
		if p.post < 0 || !p.complete {
			continue
		}
		ids, ends = append(ids, p.res.MarqueeID), append(ends, p.end)
		paid = append(paid, p.res.Outcome != OutcomeInsufficient)
		var reason *string
		if p.res.Outcome == OutcomeInsufficient {
			reason = &p.res.Error
		} else {
			through := laterOf(p.marquee.paidThrough, p.end)
			p.res.PaidThrough, want[p.res.MarqueeID] = &through, through
		}
		reasons = append(reasons, reason)
	}
	if len(ids) > 0 {
		b.Queue(`UPDATE marquees m SET
		paid_through = CASE WHEN v.paid THEN GREATEST(m.paid_through, v.day_end) ELSE m.paid_through END,
		status = CASE WHEN v.paid THEN 'funded' WHEN m.paid_through > $5 THEN m.status ELSE 'unfunded' END,
		last_funding_error = v.reason,
		last_funded_at = CASE WHEN v.paid THEN $5 ELSE m.last_funded_at END,
		updated_at = $5
		FROM unnest($1::bigint[], $2::timestamptz[], $3::bool[], $4::text[]) AS v(id, day_end, paid, reason)
		WHERE m.id = v.id
		RETURNING m.id, m.paid_through, v.paid`, ids, ends, paid, reasons, now).Query(func(rows pgx.Rows) error {
			return checkPaidThrough(rows, want)
		})
	}
	q, err := emitFunding(b, plans, now)
	if err != nil || b.Len() == 0 {
		return err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("enforcer: record funding: %w", err)
	}
	if err := told(ctx); err != nil {
		return fmt.Errorf("enforcer: %w", err)
	}
	if _, err := q.Finish(ctx, tx); err != nil {
		return fmt.Errorf("enforcer: funding events: %w", err)
	}
	return nil
}

// checkPaidThrough reads the updated Marquees and fails unless each
// funded one's new paid_through is the one computed for its event.
func checkPaidThrough(rows pgx.Rows, want map[int64]time.Time) error {
	var id int64
	var through *time.Time
	var paid bool
	n := 0
	_, err := pgx.ForEachRow(rows, []any{&id, &through, &paid}, func() error {
		if !paid {
			return nil
		}
		n++
		if w, ok := want[id]; !ok || through == nil || !w.Equal(*through) {
			return fmt.Errorf("marquee %d: paid_through is %v, the batch computed %s", id, through, w)
		}
		return nil
	})
	if err == nil && n != len(want) {
		err = fmt.Errorf("%d of %d funded Marquees updated", n, len(want))
	}
	return err
}

// aheadOfUnpaid reports whether a day starting at start is still to come
// at now while the day before it is unpaid (paid_through short of start).
// Paying it would move paid_through over the unpaid days between, and the
// gate would serve them for nothing; the day is funded when it comes (the
// sweep enqueues it), or ahead once the day before it is paid.
func aheadOfUnpaid(paidThrough *time.Time, start, now time.Time) bool {
	return start.After(now) && (paidThrough == nil || paidThrough.Before(start))
}

// laterOf is GREATEST(paid_through, end) in Go (NULL paid_through: end).
func laterOf(paidThrough *time.Time, end time.Time) time.Time {
	if paidThrough != nil && paidThrough.After(end) {
		return *paidThrough
	}
	return end
}

// completeJobs completes every finished job of the batch in tx, with its
// result as the job's output (rivercomplete: one statement for the whole
// batch, or one JobCompleteTx per job). A job that is no longer running
// (cancelled meanwhile) fails the batch, as JobCompleteTx would fail it.
func (s *Service) completeJobs(ctx context.Context, tx pgx.Tx, plans []*planned) error {
	var done []*planned
	var jobs []rivercomplete.Job[FundDayArgs]
	for _, p := range plans {
		if p.complete && p.item.job != nil {
			done = append(done, p)
			jobs = append(jobs, rivercomplete.Job[FundDayArgs]{Ctx: p.item.ctx, Job: p.item.job, Output: p.res})
		}
	}
	if err := s.runHooks(ctx, tx, done, s.hooks.afterPost); err != nil {
		return err
	}
	if err := rivercomplete.Complete(ctx, tx, s.complete, jobs); err != nil {
		return fmt.Errorf("enforcer: %w", err)
	}
	return s.runHooks(ctx, tx, done, s.hooks.beforeCommit)
}

// runHooks runs a test hook for each job; nil in production.
func (s *Service) runHooks(ctx context.Context, tx pgx.Tx, done []*planned, h func(context.Context, pgx.Tx, *river.Job[FundDayArgs]) error) error {
	if h == nil {
		return nil
	}
	for _, p := range done {
		if err := h(ctx, tx, p.item.job); err != nil {
			return err
		}
	}
	return nil
}
