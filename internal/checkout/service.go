package checkout

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/fulfillment"
)

// Options configure a Service.
type Options struct {
	// Openers by provider; a provider missing here is unavailable.
	Openers    map[string]Opener
	SKUs       map[string]fulfillment.SKU
	SuccessURL string
	CancelURL  string
	Retry      Retry
	Logger     *slog.Logger
}

// Service creates orders and opens their provider checkouts.
type Service struct{ opts Options }

// NewService returns a Service.
func NewService(opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Retry = opts.Retry.withDefaults()
	return &Service{opts: opts}
}

// OpenersFromConfig returns an Opener for every provider cfg has an API key
// for, calling the provider's API through client (nil: a default client);
// under `billing dev` (cfg.DevCheckoutURL) every other provider gets the
// simulated page.
func OpenersFromConfig(cfg *config.Config, client *http.Client) map[string]Opener {
	out := map[string]Opener{}
	if cfg.StripeSecretKey != "" {
		out[fulfillment.ProviderStripe] = NewStripe(cfg.StripeSecretKey, cfg.StripeAPIURL, client)
	}
	if cfg.PaddleAPIKey != "" {
		if p, err := NewPaddle(cfg.PaddleAPIKey, cfg.PaddleAPIURL, client); err == nil {
			out[fulfillment.ProviderPaddle] = p
		}
	}
	if cfg.CreemAPIKey != "" {
		out[fulfillment.ProviderCreem] = NewCreem(cfg.CreemAPIKey, cfg.CreemAPIURL, client)
	}
	if cfg.DevCheckoutURL != "" {
		for _, p := range fulfillment.Providers() {
			if out[p] == nil {
				out[p] = Simulated{BaseURL: cfg.DevCheckoutURL}
			}
		}
	}
	return out
}

// Available reports whether checkouts may be opened at provider.
func (s *Service) Available(provider string) bool { return s.opts.Openers[provider] != nil }

// Open creates (or, for a known key, finds) the player's order and returns
// it with its provider checkout. db must not be a transaction: the order is
// committed before the provider is called, so no transaction is ever held
// open across the call.
func (s *Service) Open(ctx context.Context, db fulfillment.DB, p fulfillment.CheckoutParams) (*fulfillment.Order, error) {
	if !fulfillment.ValidProvider(p.Provider) {
		return nil, fmt.Errorf("%w %q", fulfillment.ErrUnknownProvider, p.Provider)
	}
	opener := s.opts.Openers[p.Provider]
	if opener == nil {
		return nil, fmt.Errorf("%w: %s", ErrProviderUnavailable, p.Provider)
	}
	o, err := fulfillment.CreateCheckout(ctx, db, s.opts.SKUs, p)
	if err != nil {
		return nil, err
	}
	if o.CheckoutURL != "" || o.Status != fulfillment.StatusPending {
		return o, nil // resumed: this order's checkout was opened (or paid) already
	}
	r := Request{OrderID: o.ID, SKU: o.SKU, Catalogue: s.opts.SKUs[o.SKU], Amount: o.Amount, Currency: o.Currency,
		SuccessURL: s.opts.SuccessURL, CancelURL: s.opts.CancelURL}
	sess, err := s.opts.Retry.open(ctx, p.Provider, opener, r)
	if err != nil {
		s.opts.Logger.WarnContext(ctx, "checkout: provider call failed; the order stays pending",
			"provider", p.Provider, "order_id", o.ID, "error", err)
		return nil, fmt.Errorf("checkout: order %d: %w", o.ID, err)
	}
	return fulfillment.SetCheckout(ctx, db, o.ID, sess.ID, sess.URL)
}
