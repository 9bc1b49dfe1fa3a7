package checkout

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v82"
)

// Stripe opens Stripe Checkout Sessions through stripe-go.
type Stripe struct{ client *stripe.Client }

// NewStripe returns a Stripe opener for the API at baseURL (Stripe's, or
// stripe-mock in tests). stripe-go's own retries are off: Retry owns the
// budget, and every attempt carries the same Idempotency-Key anyway.
func NewStripe(secretKey, baseURL string, httpClient *http.Client) *Stripe {
	return &Stripe{client: NewStripeClient(secretKey, baseURL, httpClient)}
}

// NewStripeClient is the stripe-go client of our configuration, shared by
// checkouts and reconciliation.
func NewStripeClient(secretKey, baseURL string, httpClient *http.Client) *stripe.Client {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	noRetries := int64(0)
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(baseURL), HTTPClient: httpClient, MaxNetworkRetries: &noRetries,
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelError},
	})
	return stripe.NewClient(secretKey, stripe.WithBackends(backends))
}

// Open creates a payment-mode session with one line item priced from the
// snapshot, naming our order in client_reference_id and metadata.order_id.
func (s *Stripe) Open(ctx context.Context, r Request) (*Session, error) {
	params := &stripe.CheckoutSessionCreateParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModePayment)),
		ClientReferenceID: stripe.String(r.orderRef()),
		SuccessURL:        stripe.String(r.SuccessURL),
		CancelURL:         stripe.String(r.CancelURL),
		LineItems: []*stripe.CheckoutSessionCreateLineItemParams{{
			Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionCreateLineItemPriceDataParams{
				Currency:    stripe.String(r.Currency),
				UnitAmount:  stripe.Int64(r.Amount),
				ProductData: &stripe.CheckoutSessionCreateLineItemPriceDataProductDataParams{Name: stripe.String(r.ProductName())},
			},
		}},
		PaymentIntentData: &stripe.CheckoutSessionCreatePaymentIntentDataParams{
			Metadata: map[string]string{"order_id": r.orderRef()},
		},
	}
	params.AddMetadata("order_id", r.orderRef())
	params.SetIdempotencyKey(r.IdempotencyKey())
	sess, err := s.client.V1CheckoutSessions.Create(ctx, params)
	if err != nil {
		return nil, stripeError(err)
	}
	return &Session{ID: sess.ID, URL: sess.URL}, nil
}

// stripeError classifies a stripe-go error: 409 (a concurrent request with
// our key is in flight), 429 and 5xx are worth retrying, other 4xx are
// Stripe's refusal, and anything without a status is the network's fault.
func stripeError(err error) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return retryable(err, 0)
	}
	code := se.HTTPStatusCode
	if code == http.StatusConflict || code == http.StatusTooManyRequests || code >= 500 || code == 0 {
		return retryable(err, 0)
	}
	msg := se.Msg
	if msg == "" {
		msg = "status " + strconv.Itoa(code)
	}
	return &RejectedError{Provider: "stripe", Status: code, Message: msg}
}
