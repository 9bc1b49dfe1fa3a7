package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/internal/provider"
)

// ErrUnappliedPayment wraps the cancel error of a payment that minted
// nothing: a second, distinct payment for a paid order, or a payment its
// order refused. The error says what to refund.
var ErrUnappliedPayment = errors.New("fulfillment: payment recorded unapplied")

// unapplied records job's payment as unapplied with reason, to be
// refunded once the transaction commits, where a refunder is configured.
func (w *Worker) unapplied(ctx context.Context, tx pgx.Tx, job *river.Job[FulfillOrderArgs], o *Order, reason string) (verdict, error) {
	a := job.Args
	p := &Payment{Provider: a.Provider, PaymentID: a.paymentID(), OrderID: o.ID, PlayerID: o.PlayerID, EventID: a.EventID,
		Amount: a.PaidAmount, Currency: strings.TrimSpace(a.PaidCurrency), Status: PaymentUnapplied, Reason: reason}
	if err := recordPayment(ctx, tx, p, a.refs()); err != nil {
		return verdict{}, err
	}
	if err := emitUnapplied(ctx, tx, p); err != nil {
		return verdict{}, err
	}
	// Its refunds and disputes are decided too, though they claw nothing
	// back: the payment minted nothing.
	ev, err := w.reverse.apply(ctx, tx, o, p, ReversalRefund, "before-payment")
	if err != nil {
		return verdict{}, err
	}
	// Recorded and minted nothing: applied, naming the payment (a rejected
	// order's own event is refused instead: see reject).
	return verdict{outcome: OutcomeUnapplied, commit: true, ev: ev, refund: p, why: reason,
		result: appliedTo("payment", p.ID), logged: func() {
			unappliedPayments.WithLabelValues(p.Provider).Inc()
			w.logger.WarnContext(ctx, "payment unapplied", "order_id", o.ID, "provider", p.Provider, "payment_id", p.PaymentID,
				"amount", p.Amount, "currency", p.Currency, "reason", reason)
		}}, nil
}

// settleUnapplied refunds unapplied payment p when it can, and returns the
// job's cancel error naming what was (or is still to be) refunded.
func (w *Worker) settleUnapplied(ctx context.Context, p *Payment, why string) (string, error) {
	done, err := w.refund(ctx, p)
	if err != nil {
		return OutcomeError, err
	}
	return OutcomeUnapplied, river.JobCancel(fmt.Errorf("%w: %s; %s payment %s of %d %s minted nothing: %s",
		ErrUnappliedPayment, why, p.Provider, p.PaymentID, p.Amount, p.Currency, done))
}

// refund gives p back through its provider, once: the provider key is
// derived from p's row id, so a retried job gets the first refund back.
// The provider's own accepted refunds of p count: only what they leave is
// asked for. It says what happened, or returns a retryable error.
func (w *Worker) refund(ctx context.Context, p *Payment) (string, error) {
	switch {
	case p.Status == PaymentRefunded:
		return "refunded as " + p.RefundID, nil
	case p.Amount <= 0:
		return "nothing to refund", nil
	}
	left, err := leftToRefund(ctx, w.pool, p)
	if err != nil || left == 0 {
		return "refunded by " + p.Provider, err
	}
	r := w.refunders[p.Provider]
	if r == nil {
		return noRefundAPI(p), nil
	}
	aliases, err := PaymentAliases(ctx, w.pool, p.ID)
	if err != nil {
		return "", err
	}
	id, err := r.Refund(ctx, provider.RefundRequest{PaymentID: p.PaymentID, Aliases: aliases, Amount: left,
		Currency: p.Currency, IdempotencyKey: RefundKey(p.ID)})
	switch {
	case errors.Is(err, provider.ErrNotConfigured), errors.Is(err, provider.ErrUnsupported):
		return noRefundAPI(p), nil
	case errors.Is(err, provider.ErrNotRefundable):
		return fmt.Sprintf("REFUND IT to the customer (automatic refund failed: %v)", err), nil
	}
	if err != nil {
		return "", fmt.Errorf("fulfillment: refund unapplied payment %d: %w", p.ID, err)
	}
	if err := markRefundedAndEmit(ctx, w.pool, p, id); err != nil {
		return "", err
	}
	w.logger.InfoContext(ctx, "unapplied payment refunded", "payment_id", p.PaymentID, "refund_id", id)
	return "refunded automatically as " + id, nil
}

func noRefundAPI(p *Payment) string {
	return "REFUND IT to the customer (no refund API configured for " + p.Provider + ")"
}

// leftToRefund is what unapplied payment p paid minus what the provider's
// accepted refunds of it already gave back (each capped at what p paid,
// summed in numeric), never below 0.
func leftToRefund(ctx context.Context, db DB, p *Payment) (int64, error) {
	var left int64
	err := db.QueryRow(ctx, `SELECT $2::bigint - least($2::bigint, coalesce(sum(least(amount, $2::bigint)::numeric), 0))::bigint
		FROM payment_reversals WHERE payment = $1 AND kind = 'refund'`, p.ID, p.Amount).Scan(&left)
	if err != nil {
		return 0, fmt.Errorf("fulfillment: read refunds of payment %d: %w", p.ID, err)
	}
	return left, nil
}

// refundedByProvider marks unapplied payment p refunded when its accepted
// refund facts gave back everything it paid: the provider refunded it, so
// nothing is left to refund, by us or by an operator. Its refund id names
// those refunds.
func refundedByProvider(ctx context.Context, tx pgx.Tx, p *Payment, facts []fact) error {
	var ids []string
	for _, f := range facts {
		if f.kind == ReversalRefund {
			ids = append(ids, f.reversalID)
		}
	}
	id := strings.Join(ids, ", ")
	if len(id) > maxRefundID {
		id = strings.ToValidUTF8(id[:maxRefundID-3], "") + "..."
	}
	if err := markRefunded(ctx, tx, p.ID, id); err != nil {
		return err
	}
	p.Status, p.RefundID = PaymentRefunded, id
	return emitRefunded(ctx, tx, p)
}
