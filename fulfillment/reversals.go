package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/wallet"
)

// Reversal kinds and states.
const (
	ReversalRefund  = "refund"
	ReversalDispute = "dispute"

	StateSucceeded = "succeeded" // a refund that went through
	StateOpen      = "open"      // a dispute whose funds the provider withdrew
	StateWon       = "won"       // a dispute closed in our favour: funds back
	StateLost      = "lost"      // a dispute closed against us
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
	for _, p := range Providers() {
		clawbacks.WithLabelValues(p, ReversalRefund)
		clawbacks.WithLabelValues(p, ReversalDispute)
	}
}

// ErrReversalRefused wraps the cancel error of a refund or dispute that
// cannot apply to its payment (another currency, more than was paid).
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
		reverse: &reverser{wallet: wallet.New(opts.Pool, wallet.Options{SparksPerMana: opts.SparksPerMana}), now: opts.Now}}
}

// Work records the reversal and, when its payment is known, brings the
// payment's clawback to what all its reversals call for, in one transaction.
func (w *ReverseWorker) Work(ctx context.Context, job *river.Job[ReversePaymentArgs]) error {
	outcome, err := w.work(ctx, job)
	reversals.WithLabelValues(outcome).Inc()
	return err
}

func (w *ReverseWorker) work(ctx context.Context, job *river.Job[ReversePaymentArgs]) (string, error) {
	a := job.Args
	if err := a.validate(); err != nil {
		return OutcomeRefused, river.JobCancel(err)
	}
	tx, err := beginForPayment(ctx, w.pool, a.Provider, a.PaymentID)
	if err != nil {
		return OutcomeError, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := recordReversal(ctx, tx, a); err != nil {
		return OutcomeError, err
	}
	p, o, err := lockPaymentAndOrder(ctx, tx, a.Provider, a.PaymentID)
	if err != nil {
		return OutcomeError, err
	}
	outcome, refused := OutcomeAwaitingPayment, ""
	if p != nil {
		outcome = OutcomeApplied
		if refused, err = w.reverse.apply(ctx, tx, o, p, a.ReversalKind, a.ReversalID); err != nil {
			return OutcomeError, err
		}
	}
	return w.finish(ctx, tx, job, outcome, refused)
}

func (w *ReverseWorker) finish(ctx context.Context, tx pgx.Tx, job *river.Job[ReversePaymentArgs], outcome, refused string) (string, error) {
	a := job.Args
	what := fmt.Sprintf("%s %s %q", a.Provider, a.ReversalKind, a.ReversalID)
	if refused == "" {
		if err := completeAndCommit(ctx, tx, job, what); err != nil {
			return OutcomeError, err
		}
	} else if err := tx.Commit(ctx); err != nil {
		// Refused: the reversal is recorded and the job is cancelled below.
		return OutcomeError, fmt.Errorf("fulfillment: commit %s: %w", what, err)
	}
	if refused != "" {
		w.logger.WarnContext(ctx, "reversal refused", "provider", a.Provider, "reversal_id", a.ReversalID, "reason", refused)
		return OutcomeRefused, river.JobCancel(fmt.Errorf("%w: %s %s %q of payment %q: %s",
			ErrReversalRefused, a.Provider, a.ReversalKind, a.ReversalID, a.PaymentID, refused))
	}
	w.logger.InfoContext(ctx, "reversal recorded", "provider", a.Provider, "kind", a.ReversalKind, "reversal_id", a.ReversalID,
		"payment_id", a.PaymentID, "outcome", outcome)
	return outcome, nil
}

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

// recordReversal upserts the reversal row. A cumulative refund keeps its
// largest amount; a dispute's state only moves forward, open < lost < won:
// a closed dispute never reopens, and lost gives way to won because a
// lost dispute can still be reversed in our favour (Paddle's
// chargeback_reverse), while nothing turns a won dispute into a lost one.
// So any arrival order of a dispute's events ends in the same state.
func recordReversal(ctx context.Context, tx pgx.Tx, a ReversePaymentArgs) error {
	_, err := tx.Exec(ctx, `INSERT INTO payment_reversals AS r (provider, reversal_id, payment_id, kind, state, amount, currency)
		VALUES ($1, $2, $3, $4, $5, $6, lower($7))
		ON CONFLICT (provider, reversal_id) DO UPDATE SET
			amount = greatest(r.amount, EXCLUDED.amount),
			state = CASE WHEN r.state = 'won' OR (r.state = 'lost' AND EXCLUDED.state <> 'won') THEN r.state
				ELSE EXCLUDED.state END,
			updated_at = now()`,
		a.Provider, a.ReversalID, a.PaymentID, a.ReversalKind, a.State, a.Amount, a.Currency)
	if err != nil {
		return fmt.Errorf("fulfillment: record %s %s %q: %w", a.Provider, a.ReversalKind, a.ReversalID, err)
	}
	return nil
}

// lockPaymentAndOrder locks the order then the payment (the fulfil path's
// order); nil, nil when the payment is not recorded yet.
func lockPaymentAndOrder(ctx context.Context, tx pgx.Tx, provider, paymentID string) (*Payment, *Order, error) {
	var orderID int64
	err := tx.QueryRow(ctx, `SELECT order_id FROM payments WHERE provider = $1 AND payment_id = $2`,
		provider, paymentID).Scan(&orderID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fulfillment: find payment %s %q: %w", provider, paymentID, err)
	}
	o, err := lockOrder(ctx, tx, orderID)
	if err != nil {
		return nil, nil, err
	}
	p, err := paymentByProviderID(ctx, tx, provider, paymentID)
	return p, o, err
}

// reverser brings a payment's clawback in line with its reversals.
type reverser struct {
	wallet *wallet.Store
	now    func() time.Time
}

// lostMoney is what a payment's valid reversals took back from us.
type lostMoney struct {
	refunded, disputed int64
	openDispute        bool
}

// apply refuses the reversals of p that cannot apply, then posts the one
// clawback (or give-back) step that brings p's net clawback to
// ceil(minted x lost / paid), capped at minted, and updates the order. It
// returns why reversalID was refused, or "".
func (r *reverser) apply(ctx context.Context, tx pgx.Tx, o *Order, p *Payment, kind, reversalID string) (string, error) {
	refused, err := refuseInvalid(ctx, tx, p, reversalID)
	if err != nil {
		return "", err
	}
	lost, err := sumLost(ctx, tx, p)
	if err != nil {
		return "", err
	}
	target := clawbackTarget(p, lost)
	if err := r.step(ctx, tx, p, target, kind, reversalID); err != nil {
		return "", err
	}
	if p.Status == PaymentApplied {
		if err := updateOrderMoney(ctx, tx, o, lost, target, r.now()); err != nil {
			return "", err
		}
	}
	return refused, nil
}

// refuseInvalid marks p's unrefused reversals in another currency or for
// more than p's amount, and returns reversalID's refusal reason, if any.
func refuseInvalid(ctx context.Context, tx pgx.Tx, p *Payment, reversalID string) (string, error) {
	_, err := tx.Exec(ctx, `UPDATE payment_reversals SET rejected = CASE
			WHEN currency <> $3 THEN format('%s in %s, payment is in %s', kind, currency, $3::text)
			ELSE format('%s of %s exceeds the payment''s %s', kind, amount, $4::bigint) END, updated_at = now()
		WHERE provider = $1 AND payment_id = $2 AND rejected IS NULL AND (currency <> $3 OR amount > $4)`,
		p.Provider, p.PaymentID, strings.ToLower(p.Currency), p.Amount)
	if err != nil {
		return "", fmt.Errorf("fulfillment: check reversals of payment %d: %w", p.ID, err)
	}
	var reason string
	err = tx.QueryRow(ctx, `SELECT coalesce(rejected, '') FROM payment_reversals WHERE provider = $1 AND reversal_id = $2`,
		p.Provider, reversalID).Scan(&reason)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("fulfillment: read reversal %q: %w", reversalID, err)
	}
	return reason, nil
}

func sumLost(ctx context.Context, tx pgx.Tx, p *Payment) (lostMoney, error) {
	var l lostMoney
	err := tx.QueryRow(ctx, `SELECT
			coalesce(sum(amount) FILTER (WHERE kind = 'refund'), 0),
			coalesce(sum(amount) FILTER (WHERE kind = 'dispute' AND state IN ('open', 'lost')), 0),
			coalesce(bool_or(kind = 'dispute' AND state IN ('open', 'lost')), false)
		FROM payment_reversals WHERE provider = $1 AND payment_id = $2 AND rejected IS NULL`,
		p.Provider, p.PaymentID).Scan(&l.refunded, &l.disputed, &l.openDispute)
	if err != nil {
		return l, fmt.Errorf("fulfillment: sum reversals of payment %d: %w", p.ID, err)
	}
	return l, nil
}

// total is the money gone back, at most what was paid: a refund seen both
// as a refund and as a dispute is not taken twice.
func (l lostMoney) total(paid int64) int64 { return min(paid, l.refunded+l.disputed) }

// clawbackTarget is ceil(minted x lost / paid), capped at minted; 0 for a
// payment that minted nothing.
func clawbackTarget(p *Payment, l lostMoney) int64 {
	lost := l.total(p.Amount)
	if p.ManaMinted == 0 || lost <= 0 || p.Amount <= 0 {
		return 0
	}
	n := new(big.Int).Mul(big.NewInt(p.ManaMinted), big.NewInt(lost))
	n.Add(n, big.NewInt(p.Amount-1))
	n.Quo(n, big.NewInt(p.Amount))
	return min(p.ManaMinted, n.Int64())
}

// step posts the difference between target and what p has clawed back so
// far: a clawback when more went back, Mana given back when a dispute was
// won. Each step's keys are derived from the payment, the provider's
// reversal id and the step number, taken under the payment's lock.
func (r *reverser) step(ctx context.Context, tx pgx.Tx, p *Payment, target int64, kind, reversalID string) error {
	delta := target - p.ClawedBackMana
	if delta == 0 {
		return nil
	}
	key := "payment:" + strconv.FormatInt(p.ID, 10) + ":" + strconv.FormatInt(p.steps+1, 10) + ":" + truncateKey(reversalID)
	ref := fmt.Sprintf("%s %s %s of payment %s", p.Provider, kind, reversalID, p.PaymentID)
	var err error
	if delta > 0 {
		_, err = r.wallet.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: p.PlayerID, Mana: delta, Key: key, Reference: ref})
		clawbacks.WithLabelValues(p.Provider, kind).Inc()
	} else {
		_, _, err = r.wallet.CreditSettlingTx(ctx, tx, wallet.PostParams{PlayerID: p.PlayerID, Currency: wallet.Mana,
			Amount: -delta, Kind: wallet.KindClawbackReversal, Reference: ref, IdempotencyKey: key + ":back",
			Account: wallet.AccountManaIssued})
	}
	if err != nil {
		return fmt.Errorf("fulfillment: claw back payment %d: %w", p.ID, err)
	}
	_, err = tx.Exec(ctx, `UPDATE payments SET clawed_back_mana = $2, reversal_steps = reversal_steps + 1,
		updated_at = now() WHERE id = $1`, p.ID, target)
	if err != nil {
		return fmt.Errorf("fulfillment: update payment %d: %w", p.ID, err)
	}
	p.ClawedBackMana, p.steps = target, p.steps+1
	return nil
}

// truncateKey keeps derived keys within the wallet's 255 bytes.
func truncateKey(s string) string {
	if len(s) > 160 {
		return strings.ToValidUTF8(s[:160], "")
	}
	return s
}

func updateOrderMoney(ctx context.Context, tx pgx.Tx, o *Order, l lostMoney, clawed int64, now time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE orders SET refunded_amount = $2, clawed_back_mana = $3, disputed = $4,
		updated_at = $5 WHERE id = $1`, o.ID, min(o.Amount, l.refunded), clawed, l.openDispute, now)
	if err != nil {
		return fmt.Errorf("fulfillment: update order %d: %w", o.ID, err)
	}
	return nil
}
