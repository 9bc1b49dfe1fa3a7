package checkout

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
)

// Options configure a Service.
type Options struct {
	// Openers by provider (provider.Select of the program's registry); a
	// provider missing here, or that cannot open checkouts, is unavailable.
	Openers    map[string]Opener
	SKUs       map[string]fulfillment.SKU
	SuccessURL string
	CancelURL  string
	Logger     *slog.Logger
}

// Service creates orders and opens their provider checkouts.
type Service struct{ opts Options }

// NewService returns a Service.
func NewService(opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Service{opts: opts}
}

// Available reports whether checkouts may be opened at name.
func (s *Service) Available(name string) bool {
	o := s.opts.Openers[name]
	return o != nil && o.Available(provider.Checkouts) == nil
}

// Open creates (or, for a known key, finds) the player's order and returns
// it with its provider checkout. db must not be a transaction: the order is
// committed before the provider is called, so no transaction is ever held
// open across the call.
func (s *Service) Open(ctx context.Context, db fulfillment.DB, p fulfillment.CheckoutParams) (*fulfillment.Order, error) {
	if !provider.Known(p.Provider) {
		return nil, fmt.Errorf("%w %q", provider.ErrUnknown, p.Provider)
	}
	if !s.Available(p.Provider) {
		return nil, fmt.Errorf("%w: %s", ErrProviderUnavailable, p.Provider)
	}
	o, err := fulfillment.CreateCheckout(ctx, db, s.opts.SKUs, p)
	if err != nil {
		return nil, err
	}
	if o.CheckoutURL != "" || o.Status != fulfillment.StatusPending {
		return o, nil // resumed: this order's checkout was opened (or paid) already
	}
	sess, err := s.opts.Openers[p.Provider].OpenCheckout(ctx, s.request(o))
	if err != nil {
		s.opts.Logger.WarnContext(ctx, "checkout: provider call failed; the order stays pending",
			"provider", p.Provider, "order_id", o.ID, "error", err)
		return nil, fmt.Errorf("checkout: order %d: %w", o.ID, err)
	}
	return fulfillment.SetCheckout(ctx, db, o.ID, sess.ID, sess.URL)
}

// request is the provider call of order o's snapshot.
func (s *Service) request(o *fulfillment.Order) provider.CheckoutRequest {
	sku := s.opts.SKUs[o.SKU]
	return provider.CheckoutRequest{OrderID: o.ID, SKU: o.SKU, ProductName: sku.ProductName(o.SKU),
		CatalogueID: sku.CatalogueID(o.Provider), Amount: o.Amount, Currency: o.Currency,
		SuccessURL: s.opts.SuccessURL, CancelURL: s.opts.CancelURL}
}
