package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/durable"
)

// Errors of MarkRefunded. Compare with errors.Is.
var (
	ErrPaymentNotFound = errors.New("fulfillment: no such payment")
	// ErrNotUnapplied: the payment minted its order's Mana; its refunds
	// arrive as the provider's refund webhooks and claw back from there.
	ErrNotUnapplied = errors.New("fulfillment: payment is not unapplied")
	// ErrRefundedOtherwise: the payment is already marked refunded under
	// another refund id.
	ErrRefundedOtherwise = errors.New("fulfillment: payment already refunded under another refund id")
	ErrInvalidRefundID   = errors.New("fulfillment: refund id must be 1 to 255 bytes of text")
)

// maxRefundID bounds a refund id, in bytes.
const maxRefundID = 255

// markRefundedSQL moves an unapplied payment to refunded, and nothing else.
const markRefundedSQL = `UPDATE payments SET status = 'refunded', refund_id = $2, updated_at = now()
	WHERE id = $1 AND status = 'unapplied'`

// markRefunded records the automatic refund of unapplied payment id; a
// payment no longer unapplied is left as it is.
func markRefunded(ctx context.Context, db DB, id int64, refundID string) error {
	if _, err := db.Exec(ctx, markRefundedSQL, id, refundID); err != nil {
		return fmt.Errorf("fulfillment: mark payment %d refunded: %w", id, err)
	}
	return nil
}

// Beginner opens transactions: a pool, or one of its connections.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// MarkRefunded records that an operator refunded unapplied payment id
// (the payments row id) at the provider, as refundID: the payment leaves
// `billing payments list --unapplied`, and payment.refunded is written in
// the same transaction, committed through durable.Commit. No money moves
// here: an unapplied payment minted nothing. It is idempotent by (id,
// refundID): marking a payment refunded again under the same refund id
// changes nothing and reports changed false; under another refund id it
// is ErrRefundedOtherwise. An applied payment is ErrNotUnapplied.
func MarkRefunded(ctx context.Context, db Beginner, id int64, refundID string) (p *Payment, changed bool, err error) {
	if refundID == "" || len(refundID) > maxRefundID || !utf8.ValidString(refundID) || strings.ContainsRune(refundID, 0) {
		return nil, false, ErrInvalidRefundID
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("fulfillment: mark payment %d refunded: %w", id, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if p, changed, err = markRefundedTx(ctx, tx, id, refundID); err != nil {
		return nil, false, err
	}
	if changed {
		if err := emitRefunded(ctx, tx, p); err != nil {
			return nil, false, err
		}
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return nil, false, fmt.Errorf("fulfillment: commit refund of payment %d: %w", id, err)
	}
	return p, changed, nil
}

func markRefundedTx(ctx context.Context, db pgx.Tx, id int64, refundID string) (p *Payment, changed bool, err error) {
	p, err = scanPayment(db.QueryRow(ctx, markRefundedSQL+` RETURNING `+paymentColumns, id, refundID))
	if err != nil || p != nil {
		return p, p != nil, err
	}
	if p, err = scanPayment(db.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = $1`, id)); err != nil {
		return nil, false, err
	}
	switch {
	case p == nil:
		return nil, false, fmt.Errorf("%w: %d", ErrPaymentNotFound, id)
	case p.Status == PaymentRefunded && p.RefundID == refundID:
		return p, false, nil
	case p.Status == PaymentRefunded:
		return nil, false, fmt.Errorf("%w: payment %d is refunded as %q", ErrRefundedOtherwise, id, p.RefundID)
	}
	return nil, false, fmt.Errorf("%w: payment %d is %s", ErrNotUnapplied, id, p.Status)
}
