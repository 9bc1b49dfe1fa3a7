package stripe

import (
	"context"

	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/fibe-dev/billing/internal/provider"
)

// OpenCheckout implements provider.Provider: a payment-mode Checkout
// Session with one line item priced from the snapshot, naming our order in
// client_reference_id and metadata.order_id. Every attempt carries the
// Idempotency-Key derived from the order, so a retry of the call, or of the
// whole request after a crash, reopens the same session.
func (d *Driver) OpenCheckout(ctx context.Context, r provider.CheckoutRequest) (*provider.Session, error) {
	params := sessionParams(r)
	sess, err := provider.Call(ctx, d.policy, provider.OpCheckout, func(ctx context.Context) (*stripeapi.CheckoutSession, error) {
		return d.client.V1CheckoutSessions.Create(ctx, params)
	})
	if err != nil {
		return nil, err
	}
	return &provider.Session{ID: sess.ID, URL: sess.URL}, nil
}

func sessionParams(r provider.CheckoutRequest) *stripeapi.CheckoutSessionCreateParams {
	order := r.OrderRef()
	params := &stripeapi.CheckoutSessionCreateParams{
		Mode:              stripeapi.String(string(stripeapi.CheckoutSessionModePayment)),
		ClientReferenceID: stripeapi.String(order),
		SuccessURL:        stripeapi.String(r.SuccessURL),
		CancelURL:         stripeapi.String(r.CancelURL),
		LineItems: []*stripeapi.CheckoutSessionCreateLineItemParams{{
			Quantity: stripeapi.Int64(1),
			PriceData: &stripeapi.CheckoutSessionCreateLineItemPriceDataParams{
				Currency:    stripeapi.String(r.Currency),
				UnitAmount:  stripeapi.Int64(r.Amount),
				ProductData: &stripeapi.CheckoutSessionCreateLineItemPriceDataProductDataParams{Name: stripeapi.String(r.ProductName)},
			},
		}},
		PaymentIntentData: &stripeapi.CheckoutSessionCreatePaymentIntentDataParams{
			Metadata: map[string]string{"order_id": order},
		},
	}
	params.AddMetadata("order_id", order)
	params.SetIdempotencyKey(checkoutKey.For(r.OrderID))
	return params
}
