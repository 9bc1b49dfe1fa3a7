package enforcer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/wallet"
)

// Group commit of fund_day jobs. After midnight a sweep enqueues one job per
// Marquee and the workers pick them up by the dozen; funding each in its own
// transaction costs six round trips and a WAL flush per Marquee. Instead the
// jobs that are running at the same time are funded together, in one
// transaction: lock their Marquees (one statement), debit their owners
// (wallet.PostManyTx: one lookup and one pipeline), move paid_through or
// record the refusal (one statement), complete each job (JobCompleteTx), one
// commit. Every job is still its own River job, unique by (Marquee, day),
// with its own wallet key, and is completed in the transaction that debits
// it; a failed batch fails each of its jobs, which River retries.

// Batch defaults: DefaultFundBatch caps the jobs of one transaction;
// fundBatchTimeout bounds it (the jobs' own timeouts only end their wait).
const (
	DefaultFundBatch = 64
	fundBatchTimeout = 30 * time.Second
)

// fundItem is a running fund_day job waiting for its batch.
type fundItem struct {
	ctx context.Context // the job's work context: River's client, the job's output
	job *river.Job[FundDayArgs]
}

// planned is one job of a batch on its way through it.
type planned struct {
	idx      int // in the batch's items
	item     fundItem
	res      *FundResult
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
	running     bool
	paidThrough *time.Time
}

// fundBatch funds items in one transaction. Jobs whose Marquee already has
// a job in the batch (another day of it) are funded after the batch, alone.
func (s *Service) fundBatch(ctx context.Context, items []fundItem) ([]*FundResult, []error, error) {
	ctx, cancel := context.WithTimeout(ctx, fundBatchTimeout)
	defer cancel()
	plans, alone := s.plan(items)
	if len(plans) > 0 {
		if err := s.fundTogether(ctx, plans); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range alone {
		p.res, p.err = s.fundAlone(p.item.ctx, p.item.job)
	}
	out, errs := make([]*FundResult, len(items)), make([]error, len(items))
	for _, p := range append(plans, alone...) {
		out[p.idx], errs[p.idx] = p.res, p.err
	}
	return out, errs, nil
}

// plan orders the batch by Marquee (the lock order) and sets aside repeated
// Marquees and unparsable days.
func (s *Service) plan(items []fundItem) (together, alone []*planned) {
	seen := map[int64]bool{}
	for i, it := range items {
		p := &planned{idx: i, item: it, post: -1, res: &FundResult{MarqueeID: it.job.Args.MarqueeID, Day: it.job.Args.Day}}
		var start time.Time
		start, p.end, p.err = DayBounds(it.job.Args.Day, s.tz)
		switch {
		case p.err != nil:
			alone = append(alone, p) // answered by fundAlone with the same error
		case seen[it.job.Args.MarqueeID]:
			alone = append(alone, p)
		default:
			seen[it.job.Args.MarqueeID] = true
			p.res.lag = s.now().Sub(start)
			together = append(together, p)
		}
	}
	slices.SortFunc(together, func(a, b *planned) int { return cmp.Compare(a.res.MarqueeID, b.res.MarqueeID) })
	return together, alone
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
	if err := s.debit(ctx, tx, plans); err != nil {
		return err
	}
	if err := recordFunding(ctx, tx, plans, now); err != nil {
		return err
	}
	if err := s.completeJobs(ctx, tx, plans); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
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
	b.Queue(`SELECT id, player_id, daily_price, desired_state = 'running', paid_through
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
	_, err = pgx.ForEachRow(rows, []any{&id, &m.playerID, &m.price, &m.running, &m.paidThrough}, func() error {
		cp := m
		found[id] = &cp
		return nil
	})
	return found, err
}

// debit decides each job (stopped, already paid, or due) and debits the due
// ones with their day's funding key.
func (s *Service) debit(ctx context.Context, tx pgx.Tx, plans []*planned) error {
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
		default:
			p.post = len(posts)
			posts = append(posts, wallet.PostParams{PlayerID: m.playerID, Currency: wallet.Sparks, Amount: m.price,
				Direction: wallet.Debit, Kind: wallet.KindFunding, Account: wallet.AccountFundingRevenue,
				Reference:      fmt.Sprintf("marquee:%d:%s", p.res.MarqueeID, p.res.Day),
				IdempotencyKey: FundingKey(p.res.MarqueeID, p.res.Day)})
		}
	}
	if len(posts) == 0 {
		return nil
	}
	out, errs, err := s.wallet.PostManyTx(ctx, tx, posts)
	if err != nil {
		return fmt.Errorf("enforcer: debit batch: %w", err)
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
	return nil
}

// recordFunding moves paid_through of the debited Marquees to the end of
// their day (GREATEST: never back) and marks the refused ones unfunded (a
// Marquee still inside a paid day stays funded), in one statement.
func recordFunding(ctx context.Context, tx pgx.Tx, plans []*planned, now time.Time) error {
	var ids []int64
	var ends []time.Time
	var paid []bool
	var reasons []*string
	for _, p := range plans {
		if p.post < 0 || !p.complete {
			continue
		}
		ids, ends = append(ids, p.res.MarqueeID), append(ends, p.end)
		paid = append(paid, p.res.Outcome != OutcomeInsufficient)
		var reason *string
		if p.res.Outcome == OutcomeInsufficient {
			reason = &p.res.Error
		}
		reasons = append(reasons, reason)
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `UPDATE marquees m SET
		paid_through = CASE WHEN v.paid THEN GREATEST(m.paid_through, v.day_end) ELSE m.paid_through END,
		status = CASE WHEN v.paid THEN 'funded' WHEN m.paid_through > $5 THEN m.status ELSE 'unfunded' END,
		last_funding_error = v.reason,
		last_funded_at = CASE WHEN v.paid THEN $5 ELSE m.last_funded_at END,
		updated_at = $5
		FROM unnest($1::bigint[], $2::timestamptz[], $3::bool[], $4::text[]) AS v(id, day_end, paid, reason)
		WHERE m.id = v.id
		RETURNING m.id, m.paid_through`, ids, ends, paid, reasons, now)
	if err != nil {
		return fmt.Errorf("enforcer: record funding: %w", err)
	}
	moved := map[int64]*time.Time{}
	var id int64
	var through *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &through}, func() error { moved[id] = through; return nil }); err != nil {
		return fmt.Errorf("enforcer: record funding: %w", err)
	}
	for _, p := range plans {
		if p.post >= 0 && p.complete && p.res.Outcome != OutcomeInsufficient {
			p.res.PaidThrough = moved[p.res.MarqueeID]
		}
	}
	return nil
}

// completeJobs completes every finished job of the batch in tx, with its
// result as the job's output, in ONE statement: what river.JobCompleteTx
// runs for one job (the pilot's JobSetStateIfRunningMany), given all of
// them. One JobCompleteTx per job would put a round trip per job back into
// the batch, serialised behind the others. A job that is no longer running
// (cancelled meanwhile) fails the batch, as JobCompleteTx would fail it.
func (s *Service) completeJobs(ctx context.Context, tx pgx.Tx, plans []*planned) error {
	var done []*planned
	for _, p := range plans {
		if p.complete {
			done = append(done, p)
		}
	}
	if len(done) == 0 {
		return nil
	}
	if err := s.runHooks(ctx, tx, done, s.hooks.afterPost); err != nil {
		return err
	}
	client := river.ClientFromContext[pgx.Tx](done[0].item.ctx)
	now := time.Now()
	params := &riverdriver.JobSetStateIfRunningManyParams{}
	for _, p := range done {
		output, err := json.Marshal(map[string]any{rivertype.MetadataKeyOutput: p.res})
		if err != nil {
			return err
		}
		one := riverdriver.JobSetStateCompleted(p.item.job.ID, now, output)
		params.ID = append(params.ID, one.ID)
		params.Attempt = append(params.Attempt, one.Attempt)
		params.ErrData = append(params.ErrData, one.ErrData)
		params.FinalizedAt = append(params.FinalizedAt, one.FinalizedAt)
		params.MetadataDoMerge = append(params.MetadataDoMerge, one.MetadataDoMerge)
		params.MetadataUpdates = append(params.MetadataUpdates, one.MetadataUpdates)
		params.ScheduledAt = append(params.ScheduledAt, one.ScheduledAt)
		params.State = append(params.State, one.State)
	}
	rows, err := client.Pilot().JobSetStateIfRunningMany(ctx, client.Driver().UnwrapExecutor(tx), params)
	if err != nil {
		return fmt.Errorf("enforcer: complete %d jobs: %w", len(done), err)
	}
	if completed := countCompleted(rows); completed != len(done) {
		return fmt.Errorf("enforcer: completed %d of %d jobs: the others are no longer running", completed, len(done))
	}
	return s.runHooks(ctx, tx, done, s.hooks.beforeCommit)
}

func countCompleted(rows []*rivertype.JobRow) int {
	n := 0
	for _, r := range rows {
		if r.State == rivertype.JobStateCompleted {
			n++
		}
	}
	return n
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
