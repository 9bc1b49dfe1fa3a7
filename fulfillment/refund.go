package fulfillment

import (
	"context"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/provider"
)

// Refunder refunds payments through one provider's API (a provider
// driver). It is called outside any database transaction. An error
// wrapping provider.ErrNotRefundable means retrying cannot help; one
// wrapping provider.ErrNotConfigured or provider.ErrUnsupported that the
// provider has no refund API here.
type Refunder interface {
	Refund(ctx context.Context, r provider.RefundRequest) (refundID string, err error)
}

// RefundKey is the provider idempotency key of the refund of payment row
// id, and the key of its payment.refunded (events.RefundedKey).
func RefundKey(paymentRowID int64) string { return events.RefundedKey(paymentRowID) }
