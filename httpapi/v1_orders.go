package httpapi

import (
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/fulfillment"
)

// orderView is an order as the API shows it: its pricing snapshot and status.
type orderView struct {
	ID          int64      `json:"id,string"`
	SKU         string     `json:"sku"`
	Provider    string     `json:"provider"`
	Amount      int64      `json:"amount"`
	Currency    string     `json:"currency"`
	Mana        int64      `json:"mana"`
	Status      string     `json:"status"`
	Reason      string     `json:"reason,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	FulfilledAt *time.Time `json:"fulfilled_at,omitempty"`

	// What went back: refunded_amount in the order's currency (minor
	// units), clawed_back_mana net of what a won dispute gave back.
	RefundedAmount int64 `json:"refunded_amount"`
	ClawedBackMana int64 `json:"clawed_back_mana"`
}

func viewOrder(o *fulfillment.Order) *orderView {
	return &orderView{ID: o.ID, SKU: o.SKU, Provider: o.Provider, Amount: o.Amount, Currency: o.Currency,
		Mana: o.Mana, Status: o.Status, Reason: o.Reason, CreatedAt: o.CreatedAt, FulfilledAt: o.FulfilledAt,
		RefundedAmount: o.RefundedAmount, ClawedBackMana: o.ClawedBackMana}
}

func (a *api) createCheckout(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error {
	var body struct {
		SKU      string `json:"sku"`
		Provider string `json:"provider"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	o, err := fulfillment.CreateCheckout(r.Context(), tx, a.cfg.SKUs, fulfillment.CheckoutParams{
		PlayerID: player, SKU: body.SKU, Provider: body.Provider,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, viewOrder(o))
}

func (a *api) getOrder(w http.ResponseWriter, r *http.Request, player int64) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	o, err := fulfillment.GetOrder(r.Context(), a.pool, player, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, viewOrder(o))
}
