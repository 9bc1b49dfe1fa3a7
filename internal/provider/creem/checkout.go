package creem

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fibe-dev/billing/internal/provider"
)

// product is the part of GET /v1/products we check.
type product struct {
	ID       string `json:"id"`
	Price    int64  `json:"price"`
	Currency string `json:"currency"`
}

// checkoutBody is the body of POST /v1/checkouts that we send.
type checkoutBody struct {
	ProductID  string            `json:"product_id"`
	RequestID  string            `json:"request_id"`
	SuccessURL string            `json:"success_url,omitempty"`
	Metadata   map[string]string `json:"metadata"`
}

type checkoutAnswer struct {
	ID          string `json:"id"`
	CheckoutURL string `json:"checkout_url"`
}

// OpenCheckout implements provider.Provider: POST /v1/checkouts naming the
// SKU's Creem product (its catalogue id: Creem prices by product), with our
// order id as request_id and in metadata, after checking that the
// product's price is the order's snapshot. Creem takes no idempotency key:
// a crash between its answer and our storing it leaves an extra unpaid
// checkout that no customer ever sees.
func (d *Driver) OpenCheckout(ctx context.Context, r provider.CheckoutRequest) (*provider.Session, error) {
	return provider.Call(ctx, d.policy, provider.OpCheckout, func(ctx context.Context) (*provider.Session, error) {
		return d.open(ctx, r)
	})
}

// open is one attempt: the product's price check, then the checkout.
func (d *Driver) open(ctx context.Context, r provider.CheckoutRequest) (*provider.Session, error) {
	if r.CatalogueID == "" {
		return nil, fmt.Errorf("%w: sku %s has no creem_product_id", provider.ErrSKUNotConfigured, r.SKU)
	}
	var p product
	if err := d.do(ctx, http.MethodGet, "/v1/products?product_id="+url.QueryEscape(r.CatalogueID), nil, &p); err != nil {
		return nil, err
	}
	if p.Price != r.Amount || !strings.EqualFold(p.Currency, r.Currency) {
		return nil, fmt.Errorf("%w: creem product %s is %d %s, sku %s is %d %s",
			provider.ErrPriceMismatch, r.CatalogueID, p.Price, p.Currency, r.SKU, r.Amount, r.Currency)
	}
	var out checkoutAnswer
	err := d.do(ctx, http.MethodPost, "/v1/checkouts", checkoutBody{
		ProductID: r.CatalogueID, RequestID: checkoutKey.For(r.OrderID), SuccessURL: r.SuccessURL,
		Metadata: map[string]string{"order_id": r.OrderRef()},
	}, &out)
	if err != nil {
		return nil, err
	}
	if out.ID == "" || out.CheckoutURL == "" {
		return nil, provider.Transient(fmt.Errorf("creem: checkout answer without id or checkout_url"), 0)
	}
	return &provider.Session{ID: out.ID, URL: out.CheckoutURL}, nil
}
