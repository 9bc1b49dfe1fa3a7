package checkout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"
	"github.com/PaddleHQ/paddle-go-sdk/v4/pkg/paddleerr"
)

// Paddle opens Paddle transactions (their checkout URL) through paddle-go-sdk.
type Paddle struct{ sdk *paddle.SDK }

// NewPaddle returns a Paddle opener for the API at baseURL.
func NewPaddle(apiKey, baseURL string, httpClient *http.Client) (*Paddle, error) {
	sdk, err := NewPaddleSDK(apiKey, baseURL, httpClient)
	if err != nil {
		return nil, err
	}
	return &Paddle{sdk: sdk}, nil
}

// NewPaddleSDK is the paddle-go-sdk client of our configuration, shared by
// checkouts and reconciliation. Its HTTP doer turns 429 and 5xx answers into
// retryable errors before the SDK decodes them (its error type does not
// keep the status).
func NewPaddleSDK(apiKey, baseURL string, httpClient *http.Client) (*paddle.SDK, error) {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	sdk, err := paddle.New(apiKey, paddle.WithBaseURL(baseURL), paddle.WithClient(transientDoer{httpClient}))
	if err != nil {
		return nil, fmt.Errorf("checkout: paddle client: %w", err)
	}
	return sdk, nil
}

// Open creates an automatically collected transaction for the snapshot:
// the SKU's catalogue price when it names one (refused unless that price is
// the snapshot), else a non-catalogue price and product; custom_data carries
// our order id, which the transaction.completed webhook brings back.
func (p *Paddle) Open(ctx context.Context, r Request) (*Session, error) {
	item, err := p.item(ctx, r)
	if err != nil {
		return nil, err
	}
	txn, err := p.sdk.CreateTransaction(ctx, &paddle.CreateTransactionRequest{
		Items:        []paddle.CreateTransactionItems{*item},
		CustomData:   paddle.CustomData{"order_id": r.orderRef()},
		CurrencyCode: paddle.PtrTo(paddle.CurrencyCode(strings.ToUpper(r.Currency))),
	})
	if err != nil {
		return nil, paddleError(err)
	}
	if txn.Checkout == nil || txn.Checkout.URL == nil || *txn.Checkout.URL == "" {
		return nil, &RejectedError{Provider: "paddle", Status: http.StatusOK,
			Message: "transaction " + txn.ID + " has no checkout URL (set a default payment link in Paddle)"}
	}
	return &Session{ID: txn.ID, URL: *txn.Checkout.URL}, nil
}

func (p *Paddle) item(ctx context.Context, r Request) (*paddle.CreateTransactionItems, error) {
	if id := r.Catalogue.PaddlePriceID; id != "" {
		price, err := p.sdk.GetPrice(ctx, &paddle.GetPriceRequest{PriceID: id})
		if err != nil {
			return nil, paddleError(err)
		}
		got, cur := price.UnitPrice.Amount, strings.ToLower(string(price.UnitPrice.CurrencyCode))
		if got != strconv.FormatInt(r.Amount, 10) || cur != r.Currency {
			return nil, fmt.Errorf("%w: paddle price %s is %s %s, sku %s is %d %s",
				ErrPriceMismatch, id, got, cur, r.SKU, r.Amount, r.Currency)
		}
		return paddle.NewCreateTransactionItemsTransactionItemFromCatalog(
			&paddle.TransactionItemFromCatalog{Quantity: 1, PriceID: id}), nil
	}
	return paddle.NewCreateTransactionItemsTransactionItemCreateWithProduct(&paddle.TransactionItemCreateWithProduct{
		Quantity: 1,
		Price: paddle.TransactionPriceCreateWithProduct{
			Description: "billing order " + r.orderRef(),
			Name:        paddle.PtrTo(r.ProductName()),
			UnitPrice:   paddle.Money{Amount: strconv.FormatInt(r.Amount, 10), CurrencyCode: paddle.CurrencyCode(strings.ToUpper(r.Currency))},
			Quantity:    paddle.PriceQuantity{Minimum: 1, Maximum: 1},
			Product:     paddle.TransactionSubscriptionProductCreate{Name: r.ProductName(), TaxCategory: paddle.TaxCategoryStandard},
		},
	}), nil
}

func paddleError(err error) error {
	var re *retryableError
	if errors.As(err, &re) {
		return err
	}
	var pe *paddleerr.Error
	if errors.As(err, &pe) {
		msg := pe.Detail
		if msg == "" {
			msg = pe.Code
		}
		return &RejectedError{Provider: "paddle", Status: pe.Status, Message: msg}
	}
	return retryable(err, 0)
}

// transientDoer is the SDK's HTTP doer: network errors, 429 and 5xx become
// retryable errors carrying the provider's Retry-After.
type transientDoer struct{ c *http.Client }

func (d transientDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.c.Do(req)
	if err != nil {
		return nil, retryable(err, 0)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		resp.Body.Close()
		return nil, retryable(fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status), retryAfter(resp.Header))
	}
	return resp, nil
}

// retryAfter reads a Retry-After header in seconds (0 when absent), capped
// at a minute.
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, time.Minute)
}
