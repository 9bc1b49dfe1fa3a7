package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/wallet"
)

// Reversal kinds and states: what the drivers report (package provider)
// is what the facts store.
const (
	ReversalRefund  = provider.ReversalRefund
	ReversalDispute = provider.ReversalDispute

	StateSucceeded = provider.StateSucceeded // a refund that went through
	StateOpen      = provider.StateOpen      // a dispute whose funds the provider withdrew
	StateWon       = provider.StateWon       // a dispute closed in our favour: funds back
	StateLost      = provider.StateLost      // a dispute closed against us
)

// ReversePaymentArgs is the job a claimed refund or dispute event enqueues.
type ReversePaymentArgs struct {
	Provider  string `json:"provider"`
	EventID   string `json:"event_id"`
	PaymentID string `json:"payment_id"` // the provider's payment id the reversal names
	// ReversalID is the provider's refund or dispute id: one row per id.
	// Stripe's charge.refunded carries no refund id without expansion; its
	// id is the charge's and Amount the charge's cumulative amount_refunded.
	ReversalID   string `json:"reversal_id"`
	ReversalKind string `json:"kind"`  // refund or dispute
	State        string `json:"state"` // succeeded (refunds), open, won or lost (disputes)
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	// OtherRef is a second id the event names the payment by: Stripe's
	// charge beside the PaymentIntent, Creem's checkout beside the order.
	OtherRef string `json:"other_ref,omitempty"`
}

// Kind implements river.JobArgs; stable, it is stored in river_job.
func (ReversePaymentArgs) Kind() string { return "reverse_payment" }

// InsertOpts puts the job on the fulfilment queue.
func (ReversePaymentArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueFulfillment}
}

// Reversal outcomes, the label values of billing_reversals_total.
const (
	OutcomeApplied         = "applied"
	OutcomeAwaitingPayment = "awaiting_payment"
	OutcomeRefused         = "refused"
)

var (
	reversals = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_reversals_total",
		Help: "reverse_payment jobs worked, by outcome (applied, awaiting_payment, refused, error).",
	}, []string{"outcome"})
	clawbacks = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_clawbacks_total",
		Help: "Clawback steps posted, by provider and kind (refund, dispute).",
	}, []string{"provider", "kind"})
)

func init() {
	for _, o := range []string{OutcomeApplied, OutcomeAwaitingPayment, OutcomeRefused, OutcomeError} {
		reversals.WithLabelValues(o) // export zeros, so increase() sees the first one
	}
	for _, p := range provider.Names() {
		clawbacks.WithLabelValues(p, ReversalRefund)
		clawbacks.WithLabelValues(p, ReversalDispute)
	}
}

// ErrReversalRefused wraps the cancel error of a refund or dispute event
// that cannot count towards its payment (malformed, another currency).
var ErrReversalRefused = errors.New("fulfillment: refund or dispute refused")

// ReverseWorker works ReversePaymentArgs.
type ReverseWorker struct {
	river.WorkerDefaults[ReversePaymentArgs]
	pool    *pgxpool.Pool
	reverse *reverser
	logger  *slog.Logger
}

// NewReverseWorker returns the reverse_payment worker.
func NewReverseWorker(opts WorkerOptions) *ReverseWorker {
	opts = opts.withDefaults()
	return &ReverseWorker{pool: opts.Pool, logger: opts.Logger,
		reverse: &reverser{wallet: opts.Wallet, now: opts.Now}}
}

// Work records the reversal event and, when its payment is known, decides
// it and brings the payment's clawback to what its facts call for, in one
// transaction.
func (w *ReverseWorker) Work(ctx context.Context, job *river.Job[ReversePaymentArgs]) error {
	outcome, err := w.work(ctx, job)
	reversals.WithLabelValues(outcome).Inc()
	return err
}

func (w *ReverseWorker) work(ctx context.Context, job *river.Job[ReversePaymentArgs]) (string, error) {
	a := job.Args
	tx, err := beginForJob(ctx, w.pool, job.JobRow, a.Provider, a.refs())
	if err != nil {
		return OutcomeError, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	invalid := a.validate()
	if err := recordEvent(ctx, tx, a, errText(invalid)); err != nil {
		return OutcomeError, err
	}
	if invalid != nil {
		decisions.WithLabelValues(a.Provider, EventRefused).Inc()
		return w.finish(ctx, tx, job, evaluation{}, OutcomeRefused, invalid.Error())
	}
	p, o, err := lockPaymentAndOrder(ctx, tx, a.Provider, a.refs())
	if err != nil || p == nil {
		return w.finishUnknown(ctx, tx, job, err)
	}
	if _, err := addAliases(ctx, tx, p, a.refs()); err != nil {
		return OutcomeError, err
	}
	ev, err := w.reverse.apply(ctx, tx, o, p, a.ReversalKind, a.ReversalID)
	if err != nil {
		return OutcomeError, err
	}
	status, reason := ev.decision(a.EventID)
	if status == EventRefused {
		return w.finish(ctx, tx, job, ev, OutcomeRefused, reason)
	}
	return w.finish(ctx, tx, job, ev, OutcomeApplied, "")
}

// finishUnknown completes the job of an event whose payment is not known
// yet: the event waits, pending, for its payment.
func (w *ReverseWorker) finishUnknown(ctx context.Context, tx pgx.Tx, job *river.Job[ReversePaymentArgs], err error) (string, error) {
	if err != nil {
		return OutcomeError, err
	}
	return w.finish(ctx, tx, job, evaluation{}, OutcomeAwaitingPayment, "")
}

// finish commits; a refused event's job is then cancelled (it stands out
// in River UI), every other one completed in the transaction.
func (w *ReverseWorker) finish(ctx context.Context, tx pgx.Tx, job *river.Job[ReversePaymentArgs], ev evaluation,
	outcome, refused string) (string, error) {
	a := job.Args
	what := fmt.Sprintf("%s %s %q", a.Provider, a.ReversalKind, a.ReversalID)
	if err := recordOutcomes(ctx, tx, a.Provider, a.EventID, reversalResult(a, outcome, refused), ev); err != nil {
		return OutcomeError, err
	}
	if refused == "" {
		if err := completeAndCommit(ctx, tx, job, what); err != nil {
			return OutcomeError, err
		}
	} else if err := durable.Commit(ctx, tx); err != nil {
		return OutcomeError, fmt.Errorf("fulfillment: commit %s: %w", what, err)
	}
	ev.report(func(msg string, args ...any) { w.logger.WarnContext(ctx, msg, args...) })
	if refused != "" {
		return OutcomeRefused, river.JobCancel(fmt.Errorf("%w: %s %s %q of payment %q: %s",
			ErrReversalRefused, a.Provider, a.ReversalKind, a.ReversalID, a.PaymentID, refused))
	}
	w.logger.InfoContext(ctx, "reversal recorded", "provider", a.Provider, "kind", a.ReversalKind, "reversal_id", a.ReversalID,
		"payment_id", a.PaymentID, "outcome", outcome)
	return outcome, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (a ReversePaymentArgs) refs() []string { return refs(a.PaymentID, a.OtherRef) }

func (a ReversePaymentArgs) validate() error {
	kindOK := (a.ReversalKind == ReversalRefund && a.State == StateSucceeded) ||
		(a.ReversalKind == ReversalDispute && (a.State == StateOpen || a.State == StateWon || a.State == StateLost))
	switch {
	case !kindOK:
		return fmt.Errorf("%w: unknown kind %q or state %q", ErrReversalRefused, a.ReversalKind, a.State)
	case a.Amount < 0:
		return fmt.Errorf("%w: negative amount %d", ErrReversalRefused, a.Amount)
	case a.PaymentID == "" || a.ReversalID == "":
		return fmt.Errorf("%w: no payment or reversal id", ErrReversalRefused)
	}
	return nil
}

// lockPaymentAndOrder locks the order then the payment (the fulfil path's
// order) that any of ids names; nil, nil when none is recorded yet.
func lockPaymentAndOrder(ctx context.Context, tx pgx.Tx, provider string, ids []string) (*Payment, *Order, error) {
	orderID, ok, err := paymentOrderByRefs(ctx, tx, provider, ids)
	if err != nil || !ok {
		return nil, nil, err
	}
	o, err := lockOrder(ctx, tx, orderID)
	if err != nil {
		return nil, nil, err
	}
	p, err := paymentByRefs(ctx, tx, provider, ids)
	return p, o, err
}

// reverser brings a payment's clawback in line with its facts.
type reverser struct {
	wallet *wallet.Store
	now    func() time.Time
}

// apply decides p's pending reversal events, folds its accepted ones into
// facts, then posts the one clawback (or give-back) step that brings p's
// net clawback to ceil(minted x lost / paid), capped at minted, and updates
// the order. kind and reversalID name what set it off, in the step's key.
func (r *reverser) apply(ctx context.Context, tx pgx.Tx, o *Order, p *Payment, kind, reversalID string) (evaluation, error) {
	events, err := eventsOf(ctx, tx, p)
	if err != nil {
		return evaluation{}, err
	}
	decideAll(p, events)
	if err := saveDecisions(ctx, tx, events); err != nil {
		return evaluation{}, err
	}
	facts := foldFacts(p, events)
	if err := saveFacts(ctx, tx, p, facts); err != nil {
		return evaluation{}, err
	}
	lost := lostOf(facts, max(p.Amount, 0))
	target := clawbackTarget(p, lost)
	debt, err := r.step(ctx, tx, p, target, kind, reversalID)
	if err != nil {
		return evaluation{}, err
	}
	switch {
	case p.Status == PaymentApplied:
		err = updateOrderMoney(ctx, tx, o, lost, target, r.now())
	case p.Status == PaymentUnapplied && p.Amount > 0 && lost.refunded >= p.Amount:
		err = refundedByProvider(ctx, tx, p, facts)
	}
	if err != nil {
		return evaluation{}, err
	}
	if err := emitDecisions(ctx, tx, o, p, events, debt); err != nil {
		return evaluation{}, err
	}
	return evaluation{payment: p, events: events}, nil
}

// step posts the difference between target and what p has clawed back so
// far: a clawback when more went back, Mana given back when a dispute was
// won (recovering first what a forgiveness wrote off of p's debt). Each
// step's keys are derived from the payment, the provider's reversal id and
// the step number, taken under the payment's lock. It returns the Mana a
// clawback recorded as debt.
func (r *reverser) step(ctx context.Context, tx pgx.Tx, p *Payment, target int64, kind, reversalID string) (int64, error) {
	delta := target - p.ClawedBackMana
	if delta == 0 {
		return 0, nil
	}
	key := wallet.ReversalKey(p.ID, p.steps+1, reversalID)
	ref := fmt.Sprintf("%s %s %s of payment %s", p.Provider, kind, reversalID, p.PaymentID)
	var err error
	var debt int64
	if delta > 0 {
		var c *wallet.Clawback
		c, err = r.wallet.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: p.PlayerID, Mana: delta, Key: key, Reference: ref})
		if c != nil {
			debt = c.Debt
		}
		clawbacks.WithLabelValues(p.Provider, kind).Inc()
	} else {
		// A write-off of the debt this payment's clawbacks opened is
		// recovered first; only the rest reaches the player.
		_, err = r.wallet.GiveBackTx(ctx, tx, wallet.GiveBackParams{PlayerID: p.PlayerID, Mana: -delta, Key: key,
			Reference: ref, Clawbacks: wallet.ReversalPrefix(p.ID)})
	}
	if err != nil {
		return 0, fmt.Errorf("fulfillment: claw back payment %d: %w", p.ID, err)
	}
	_, err = tx.Exec(ctx, `UPDATE payments SET clawed_back_mana = $2, reversal_steps = reversal_steps + 1,
		updated_at = now() WHERE id = $1`, p.ID, target)
	if err != nil {
		return 0, fmt.Errorf("fulfillment: update payment %d: %w", p.ID, err)
	}
	p.ClawedBackMana, p.steps = target, p.steps+1
	return debt, nil
}

func updateOrderMoney(ctx context.Context, tx pgx.Tx, o *Order, l lostMoney, clawed int64, now time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE orders SET refunded_amount = $2, clawed_back_mana = $3, disputed = $4,
		updated_at = $5 WHERE id = $1`, o.ID, min(o.Amount, l.refunded), clawed, l.openDispute, now)
	if err != nil {
		return fmt.Errorf("fulfillment: update order %d: %w", o.ID, err)
	}
	return nil
}

// DecidePending decides the pending reversal events of every known
// payment (left pending by an upgrade, or by an alias recorded in a job
// that failed before deciding them), each payment in a transaction of its
// own under its locks, and brings its clawback to what its facts imply.
// It returns how many payments it evaluated.
func (w *ReverseWorker) DecidePending(ctx context.Context) (int, error) {
	rows, err := w.pool.Query(ctx, `SELECT DISTINCT p.provider, p.payment_id FROM payments p
		JOIN payment_aliases a ON a.payment = p.id
		JOIN reversal_events e ON e.provider = a.provider AND (e.payment_ref = a.alias OR e.other_ref = a.alias)
		WHERE e.status = 'pending' ORDER BY 1, 2`)
	if err != nil {
		return 0, fmt.Errorf("fulfillment: find pending reversal events: %w", err)
	}
	pending, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var ref [2]string
		return ref, r.Scan(&ref[0], &ref[1])
	})
	if err != nil {
		return 0, fmt.Errorf("fulfillment: find pending reversal events: %w", err)
	}
	for _, r := range pending {
		if err := w.decidePayment(ctx, r[0], r[1]); err != nil {
			return 0, err
		}
	}
	return len(pending), nil
}

func (w *ReverseWorker) decidePayment(ctx context.Context, provider, paymentID string) error {
	tx, err := beginForPayment(ctx, w.pool, provider, []string{paymentID})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	p, o, err := lockPaymentAndOrder(ctx, tx, provider, []string{paymentID})
	if err != nil || p == nil {
		return err
	}
	ev, err := w.reverse.apply(ctx, tx, o, p, ReversalRefund, "decide-pending")
	if err != nil {
		return err
	}
	if err := recordOutcomes(ctx, tx, provider, "", nil, ev); err != nil {
		return err
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return fmt.Errorf("fulfillment: commit decisions of payment %d: %w", p.ID, err)
	}
	ev.report(func(msg string, args ...any) { w.logger.WarnContext(ctx, msg, args...) })
	return nil
}
