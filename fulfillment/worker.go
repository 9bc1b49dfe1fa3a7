package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/fibe-dev/billing/internal/payments/outcome"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/wallet"
)

// QueueFulfillment is the River queue fulfill_order jobs run on; the worker
// process configures it as jobs.QueueFulfillment, an alias of this one.
const QueueFulfillment = "fulfillment"

// FulfillOrderArgs is the job a claimed completed-payment event enqueues.
type FulfillOrderArgs struct {
	OrderID      int64  `json:"order_id"`
	EventID      string `json:"event_id"`
	Provider     string `json:"provider"`
	PaidAmount   int64  `json:"paid_amount"`
	PaidCurrency string `json:"paid_currency"`
	// PaymentID is the provider object that is the payment (Stripe's
	// Checkout Session, Paddle's transaction, Creem's order). Empty in jobs
	// enqueued before payments were recorded: see legacyPaymentID.
	PaymentID string `json:"payment_id,omitempty"`
	// Aliases are the other ids the event names the payment by (Stripe's
	// PaymentIntent, Creem's checkout): refunds and disputes that name only
	// one of them find the payment through it.
	Aliases []string `json:"aliases,omitempty"`
}

func (a FulfillOrderArgs) paymentID() string {
	if a.PaymentID == "" {
		return legacyPaymentID(a.OrderID)
	}
	return a.PaymentID
}

// refs are every id the job's event names its payment by, its identity first.
func (a FulfillOrderArgs) refs() []string { return refs(a.paymentID(), a.Aliases...) }

// Kind implements river.JobArgs; stable, it is stored in river_job.
func (FulfillOrderArgs) Kind() string { return "fulfill_order" }

// InsertOpts puts the job on the fulfillment queue.
func (FulfillOrderArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueFulfillment}
}

// Fulfillment outcomes, the label values of billing_fulfilments_total.
const (
	OutcomeFulfilled        = "fulfilled"
	OutcomeAlreadyFulfilled = "already_fulfilled"
	OutcomeRejected         = "rejected"
	OutcomeAlreadyRejected  = "already_rejected"
	OutcomeUnknownOrder     = "unknown_order"
	OutcomeUnapplied        = "unapplied"
	OutcomeError            = "error"
)

var fulfilments = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "billing_fulfilments_total",
	Help: "fulfill_order jobs worked, by outcome (fulfilled, already_fulfilled, rejected, already_rejected, unknown_order, unapplied, error).",
}, []string{"outcome"})

func init() {
	for _, o := range []string{OutcomeFulfilled, OutcomeAlreadyFulfilled, OutcomeRejected, OutcomeAlreadyRejected,
		OutcomeUnknownOrder, OutcomeUnapplied, OutcomeError} {
		fulfilments.WithLabelValues(o) // export zeros, so increase() sees the first one
	}
}

// ErrPaymentMismatch wraps the cancel error of a payment whose amount or
// currency differs from the order's snapshot.
var ErrPaymentMismatch = errors.New("fulfillment: paid amount or currency does not match the order")

// WorkerOptions configure NewWorker, NewReverseWorker and Register.
type WorkerOptions struct {
	Pool *pgxpool.Pool
	// Wallet mints and claws back Mana (required): the program's one store.
	Wallet *wallet.Store
	Logger *slog.Logger     // nil is slog.Default()
	Now    func() time.Time // nil is time.Now
	// Refunders refund unapplied payments, by provider; a provider without
	// one leaves its unapplied payments for an operator.
	Refunders map[string]Refunder
}

// Register adds the fulfill_order and reverse_payment workers to workers.
// The payment path has no periodic job.
func Register(workers *river.Workers, opts WorkerOptions) []*river.PeriodicJob {
	river.AddWorker(workers, NewWorker(opts))
	river.AddWorker(workers, NewReverseWorker(opts))
	return nil
}

func (o WorkerOptions) withDefaults() WorkerOptions {
	if o.Wallet == nil {
		panic("fulfillment: WorkerOptions.Wallet is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Worker works FulfillOrderArgs.
type Worker struct {
	river.WorkerDefaults[FulfillOrderArgs]
	pool      *pgxpool.Pool
	wallet    *wallet.Store
	reverse   *reverser
	refunders map[string]Refunder
	logger    *slog.Logger
	now       func() time.Time
}

// NewWorker returns the fulfill_order worker.
func NewWorker(opts WorkerOptions) *Worker {
	opts = opts.withDefaults()
	return &Worker{
		pool:      opts.Pool,
		wallet:    opts.Wallet,
		reverse:   &reverser{wallet: opts.Wallet, now: opts.Now},
		refunders: opts.Refunders,
		logger:    opts.Logger,
		now:       opts.Now,
	}
}

// Work fulfils one order in one transaction: lock, check, credit, mark,
// complete the job, commit.
func (w *Worker) Work(ctx context.Context, job *river.Job[FulfillOrderArgs]) error {
	outcome, err := w.work(ctx, job)
	fulfilments.WithLabelValues(outcome).Inc()
	return err
}

// verdict is what a fulfil job decided inside its transaction, for work
// to carry out: commit (and complete the job) or roll back, then the
// effects that must wait for the commit (reports, a provider refund).
type verdict struct {
	outcome  string
	commit   bool // commit the transaction; else roll it back
	complete bool // complete the job in it; else River finishes it after Work returns
	ev       evaluation
	refund   *Payment // an unapplied payment to give back after the commit
	why      string   // why refund is unapplied
	logged   func()   // the log line of a committed decision
	err      error    // the job's own error (a cancel), when nothing is refunded
	// result is the event's outcome (invariant 11), recorded in the
	// transaction when it commits; nil records none.
	result *outcome.Result
}

// work owns the job's transaction: it begins it, lets decide do every
// database write in it, commits or rolls back in this one place, and only
// then runs what must follow a commit (the provider refund: no network
// call ever runs inside the transaction).
func (w *Worker) work(ctx context.Context, job *river.Job[FulfillOrderArgs]) (string, error) {
	tx, err := beginForJob(ctx, w.pool, job.JobRow, job.Args.Provider, job.Args.refs())
	if err != nil {
		return OutcomeError, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	v, err := w.decide(ctx, tx, job)
	if err != nil {
		return OutcomeError, err
	}
	if err := w.end(ctx, tx, job, v); err != nil {
		return OutcomeError, err
	}
	if v.refund != nil {
		outcome, err := w.settleUnapplied(ctx, v.refund, v.why)
		if outcome == OutcomeUnapplied {
			outcome = v.outcome // unapplied, or rejected
		}
		return outcome, err
	}
	return v.outcome, v.err
}

// end commits tx (completing the job when v says so) and reports what was
// decided, or rolls tx back: either way no lock is held after it.
func (w *Worker) end(ctx context.Context, tx pgx.Tx, job *river.Job[FulfillOrderArgs], v verdict) error {
	if !v.commit {
		return tx.Rollback(ctx)
	}
	if err := recordOutcomes(ctx, tx, job.Args.Provider, job.Args.EventID, v.result, v.ev); err != nil {
		return err
	}
	if err := commitVerdict(ctx, tx, job, v); err != nil {
		return err
	}
	w.report(ctx, v.ev)
	if v.logged != nil {
		v.logged()
	}
	return nil
}

func commitVerdict(ctx context.Context, tx pgx.Tx, job *river.Job[FulfillOrderArgs], v verdict) error {
	what := "order " + strconv.FormatInt(job.Args.OrderID, 10)
	if v.complete {
		return completeAndCommit(ctx, tx, job, what)
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return fmt.Errorf("fulfillment: commit %s: %w", what, err)
	}
	return nil
}

// decide applies job's payment to its order inside tx.
func (w *Worker) decide(ctx context.Context, tx pgx.Tx, job *river.Job[FulfillOrderArgs]) (verdict, error) {
	a := job.Args
	o, err := lockOrder(ctx, tx, a.OrderID)
	if errors.Is(err, ErrNotFound) {
		// Committed, for its refused outcome alone; the job is cancelled.
		return verdict{outcome: OutcomeUnknownOrder, commit: true,
			result: refusedFor(fmt.Sprintf("order %d does not exist", a.OrderID)), err: river.JobCancel(fmt.Errorf(
				"fulfillment: %s event %q names order %d, which does not exist: %w", a.Provider, a.EventID, a.OrderID, err))}, nil
	}
	if err != nil {
		return verdict{}, err
	}
	p, err := paymentByRefs(ctx, tx, a.Provider, a.refs())
	switch {
	case err != nil:
		return verdict{}, err
	case p != nil:
		return w.known(ctx, tx, job, o, p)
	case o.Paid():
		return w.unapplied(ctx, tx, job, o, fmt.Sprintf("order %d is already paid (a second, distinct payment)", o.ID))
	case o.Status == StatusRejected:
		return w.unapplied(ctx, tx, job, o, fmt.Sprintf("order %d was rejected earlier (%s)", o.ID, o.Reason))
	}
	if reason := mismatch(o, a); reason != "" {
		return w.reject(ctx, tx, job, o, reason)
	}
	return w.fulfil(ctx, tx, job, o)
}

// known handles another event about payment p, already recorded: Stripe's
// completed then async_payment_succeeded of one Checkout Session, a
// redelivery under another event id, or a retry after a commit whose
// acknowledgement was lost. Nothing mints again; ids the event adds are
// recorded as aliases, and the events that named only them are decided.
// An unapplied payment's refund is finished.
func (w *Worker) known(ctx context.Context, tx pgx.Tx, job *river.Job[FulfillOrderArgs], o *Order, p *Payment) (verdict, error) {
	added, err := addAliases(ctx, tx, p, job.Args.refs())
	if err != nil {
		return verdict{}, err
	}
	// Committed even with nothing added: the event's outcome is recorded.
	v := verdict{outcome: OutcomeAlreadyFulfilled, commit: true, complete: true, result: appliedTo("payment", p.ID)}
	if added > 0 {
		if v.ev, err = w.reverse.apply(ctx, tx, o, p, ReversalRefund, "before-payment"); err != nil {
			return verdict{}, err
		}
	}
	if p.Status == PaymentApplied {
		return v, nil
	}
	v.outcome, v.complete, v.refund, v.why = OutcomeUnapplied, false, p, p.Reason
	if o.Status == StatusRejected {
		v.why = fmt.Sprintf("order %d was rejected earlier (%s)", o.ID, o.Reason)
		v.result = refusedFor(v.why)
	}
	return v, nil
}

// report logs and counts what an evaluation decided, after its commit.
func (w *Worker) report(ctx context.Context, ev evaluation) {
	ev.report(func(msg string, args ...any) { w.logger.WarnContext(ctx, msg, args...) })
}

// mismatch explains why a payment does not pay for o, or returns "".
func mismatch(o *Order, a FulfillOrderArgs) string {
	if a.Provider != o.Provider {
		return fmt.Sprintf("%s event %s paid an order opened as a %s checkout", a.Provider, a.EventID, o.Provider)
	}
	if a.PaidAmount == o.Amount && strings.EqualFold(strings.TrimSpace(a.PaidCurrency), o.Currency) {
		return ""
	}
	return fmt.Sprintf("%s event %s paid %d %s, order snapshot is %d %s",
		a.Provider, a.EventID, a.PaidAmount, strings.ToLower(a.PaidCurrency), o.Amount, o.Currency)
}

func (w *Worker) reject(ctx context.Context, tx pgx.Tx, job *river.Job[FulfillOrderArgs], o *Order, reason string) (verdict, error) {
	if err := markRejected(ctx, tx, o.ID, reason, w.now()); err != nil {
		return verdict{}, err
	}
	// Cancelled, not retried: a retry cannot change what was paid, and a
	// cancelled job stands out in the River UI for an operator to refund.
	v, err := w.unapplied(ctx, tx, job, o, fmt.Sprintf("%v: %s", ErrPaymentMismatch, reason))
	v.outcome, v.result = OutcomeRejected, refusedFor(reason)
	unappliedLog := v.logged
	v.logged = func() {
		w.logger.WarnContext(ctx, "order rejected", "order_id", o.ID, "reason", reason)
		unappliedLog()
	}
	return v, err
}

func (w *Worker) fulfil(ctx context.Context, tx pgx.Tx, job *river.Job[FulfillOrderArgs], o *Order) (verdict, error) {
	a := job.Args
	t, settled, err := w.wallet.CreditSettlingTx(ctx, tx, wallet.PostParams{
		PlayerID:       o.PlayerID,
		Currency:       wallet.Mana,
		Amount:         o.Mana,
		Kind:           wallet.KindPurchase,
		Reference:      "order:" + strconv.FormatInt(o.ID, 10),
		IdempotencyKey: wallet.FulfilmentKey(o.ID),
		Account:        wallet.AccountManaIssued,
	})
	if errors.Is(err, wallet.ErrIdempotencyKeyReused) {
		// Someone posted under this order's key with other parameters: a
		// bug, not a transient failure. Stop and make it visible.
		return verdict{outcome: OutcomeError, err: river.JobCancel(fmt.Errorf("fulfillment: order %d: %w", o.ID, err))}, nil
	}
	if err != nil {
		return verdict{}, fmt.Errorf("fulfillment: credit order %d: %w", o.ID, err)
	}
	p := &Payment{Provider: a.Provider, PaymentID: a.paymentID(), OrderID: o.ID, PlayerID: o.PlayerID, EventID: a.EventID,
		Amount: a.PaidAmount, Currency: o.Currency, ManaMinted: o.Mana, Status: PaymentApplied}
	if err := recordPayment(ctx, tx, p, a.refs()); err != nil {
		return verdict{}, err
	}
	if err := markFulfilled(ctx, tx, o.ID, t.ID, w.now()); err != nil {
		return verdict{}, err
	}
	// Refunds or disputes that arrived before the payment were recorded
	// then; the payment mints, and is clawed back at once.
	ev, err := w.reverse.apply(ctx, tx, o, p, ReversalRefund, "before-payment")
	if err != nil {
		return verdict{}, err
	}
	if err := emitFulfilled(ctx, tx, o, p, t, settled); err != nil {
		return verdict{}, err
	}
	return verdict{outcome: OutcomeFulfilled, commit: true, complete: true, ev: ev,
		result: appliedTo("wallet_transaction", t.ID), logged: func() {
			w.logger.InfoContext(ctx, "order fulfilled", "order_id", o.ID, "player_id", o.PlayerID, "mana", o.Mana,
				"debt_settled", settled, "wallet_transaction_id", t.ID, "replayed", t.Replayed)
		}}, nil
}

// completeAndCommit marks job completed inside tx and commits, so the job
// is done exactly when its effects are; what names the work in the error.
func completeAndCommit[T river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[T], what string) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("fulfillment: complete job %d: %w", job.ID, err)
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return fmt.Errorf("fulfillment: commit %s: %w", what, err)
	}
	return nil
}
