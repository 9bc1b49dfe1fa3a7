package paddle

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	paddleapi "github.com/PaddleHQ/paddle-go-sdk/v4"

	"github.com/fibe-dev/billing/internal/provider"
)

// OpenCheckout implements provider.Provider: an automatically collected
// transaction for the snapshot, of the SKU's catalogue price when it names
// one (refused unless that price is the snapshot), else of a non-catalogue
// price and product; custom_data carries our order id, which the
// transaction.completed webhook brings back. Paddle takes no idempotency
// key: a crash between its answer and our storing it leaves an extra draft
// transaction that no customer ever sees.
func (d *Driver) OpenCheckout(ctx context.Context, r provider.CheckoutRequest) (*provider.Session, error) {
	txn, err := provider.Call(ctx, d.policy, provider.OpCheckout, func(ctx context.Context) (*paddleapi.Transaction, error) {
		item, err := d.item(ctx, r)
		if err != nil {
			return nil, err
		}
		return d.sdk.CreateTransaction(ctx, &paddleapi.CreateTransactionRequest{
			Items:        []paddleapi.CreateTransactionItems{*item},
			CustomData:   paddleapi.CustomData{"order_id": r.OrderRef()},
			CurrencyCode: paddleapi.PtrTo(paddleapi.CurrencyCode(strings.ToUpper(r.Currency))),
		})
	})
	if err != nil {
		return nil, err
	}
	if txn.Checkout == nil || txn.Checkout.URL == nil || *txn.Checkout.URL == "" {
		return nil, &provider.RejectedError{Provider: Name, Status: http.StatusOK,
			Message: "transaction " + txn.ID + " has no checkout URL (set a default payment link in Paddle)"}
	}
	return &provider.Session{ID: txn.ID, URL: *txn.Checkout.URL}, nil
}

func (d *Driver) item(ctx context.Context, r provider.CheckoutRequest) (*paddleapi.CreateTransactionItems, error) {
	if id := r.CatalogueID; id != "" {
		price, err := d.sdk.GetPrice(ctx, &paddleapi.GetPriceRequest{PriceID: id})
		if err != nil {
			return nil, err
		}
		got, cur := price.UnitPrice.Amount, strings.ToLower(string(price.UnitPrice.CurrencyCode))
		if got != strconv.FormatInt(r.Amount, 10) || cur != r.Currency {
			return nil, fmt.Errorf("%w: paddle price %s is %s %s, sku %s is %d %s",
				provider.ErrPriceMismatch, id, got, cur, r.SKU, r.Amount, r.Currency)
		}
		return paddleapi.NewCreateTransactionItemsTransactionItemFromCatalog(
			&paddleapi.TransactionItemFromCatalog{Quantity: 1, PriceID: id}), nil
	}
	amount := paddleapi.Money{Amount: strconv.FormatInt(r.Amount, 10), CurrencyCode: paddleapi.CurrencyCode(strings.ToUpper(r.Currency))}
	return paddleapi.NewCreateTransactionItemsTransactionItemCreateWithProduct(&paddleapi.TransactionItemCreateWithProduct{
		Quantity: 1,
		Price: paddleapi.TransactionPriceCreateWithProduct{
			Description: "billing order " + r.OrderRef(),
			Name:        paddleapi.PtrTo(r.ProductName),
			UnitPrice:   amount,
			Quantity:    paddleapi.PriceQuantity{Minimum: 1, Maximum: 1},
			Product:     paddleapi.TransactionSubscriptionProductCreate{Name: r.ProductName, TaxCategory: paddleapi.TaxCategoryStandard},
		},
	}), nil
}
