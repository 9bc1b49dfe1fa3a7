package checkout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Creem opens Creem checkouts through its REST API (it has no Go library):
// POST /v1/checkouts naming the SKU's Creem product, with our order id as
// request_id and in metadata, after checking that the product's price is
// the order's snapshot.
type Creem struct {
	apiKey, baseURL string
	client          *http.Client
}

// NewCreem returns a Creem opener for the API at baseURL.
func NewCreem(apiKey, baseURL string, httpClient *http.Client) *Creem {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	return &Creem{apiKey: apiKey, baseURL: strings.TrimRight(baseURL, "/"), client: httpClient}
}

// creemProduct is the part of GET /v1/products we check.
type creemProduct struct {
	ID       string `json:"id"`
	Price    int64  `json:"price"`
	Currency string `json:"currency"`
}

// CreemCheckoutRequest is the body of POST /v1/checkouts that we send.
type CreemCheckoutRequest struct {
	ProductID  string            `json:"product_id"`
	RequestID  string            `json:"request_id"`
	SuccessURL string            `json:"success_url,omitempty"`
	Metadata   map[string]string `json:"metadata"`
}

type creemCheckout struct {
	ID          string `json:"id"`
	CheckoutURL string `json:"checkout_url"`
}

// Open checks the product's price and creates the checkout.
func (c *Creem) Open(ctx context.Context, r Request) (*Session, error) {
	product := r.Catalogue.CreemProductID
	if product == "" {
		return nil, fmt.Errorf("%w: sku %s has no creem_product_id", ErrNotConfigured, r.SKU)
	}
	var p creemProduct
	if err := c.do(ctx, http.MethodGet, "/v1/products?product_id="+url.QueryEscape(product), nil, &p); err != nil {
		return nil, err
	}
	if p.Price != r.Amount || !strings.EqualFold(p.Currency, r.Currency) {
		return nil, fmt.Errorf("%w: creem product %s is %d %s, sku %s is %d %s",
			ErrPriceMismatch, product, p.Price, p.Currency, r.SKU, r.Amount, r.Currency)
	}
	var out creemCheckout
	err := c.do(ctx, http.MethodPost, "/v1/checkouts", CreemCheckoutRequest{
		ProductID: product, RequestID: "order_" + r.orderRef(), SuccessURL: r.SuccessURL,
		Metadata: map[string]string{"order_id": r.orderRef()},
	}, &out)
	if err != nil {
		return nil, err
	}
	if out.ID == "" || out.CheckoutURL == "" {
		return nil, retryable(fmt.Errorf("creem: checkout answer without id or checkout_url"), 0)
	}
	return &Session{ID: out.ID, URL: out.CheckoutURL}, nil
}

func (c *Creem) do(ctx context.Context, method, path string, body, dst any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("creem: encode: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, rd)
	if err != nil {
		return fmt.Errorf("creem: %w", err)
	}
	req.Header.Set("x-api-key", c.apiKey)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return retryable(fmt.Errorf("creem: %s %s: %w", method, path, err), 0)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case err != nil:
		return retryable(fmt.Errorf("creem: read answer: %w", err), 0)
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return retryable(fmt.Errorf("creem: %s %s: %s", method, path, resp.Status), retryAfter(resp.Header))
	case resp.StatusCode >= 400:
		return &RejectedError{Provider: "creem", Status: resp.StatusCode, Message: creemMessage(raw)}
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return retryable(fmt.Errorf("creem: decode %s answer: %w", path, err), 0)
	}
	return nil
}

// creemMessage extracts Creem's error message, or the body's start.
func creemMessage(raw []byte) string {
	var e struct {
		Message any    `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Message != nil {
		return fmt.Sprint(e.Message)
	}
	if e.Error != "" {
		return e.Error
	}
	return string(raw[:min(len(raw), 200)])
}
