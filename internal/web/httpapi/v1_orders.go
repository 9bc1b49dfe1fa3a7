package httpapi

import (
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/web/idempotency"
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
	// CheckoutURL is the provider's hosted checkout of a pending order.
	CheckoutURL string `json:"checkout_url,omitempty"`

	// What went back: refunded_amount in the order's currency (minor
	// units), clawed_back_mana net of what a won dispute gave back.
	RefundedAmount int64 `json:"refunded_amount"`
	ClawedBackMana int64 `json:"clawed_back_mana"`
}

func viewOrder(o *fulfillment.Order) *orderView {
	return &orderView{ID: o.ID, SKU: o.SKU, Provider: o.Provider, Amount: o.Amount, Currency: o.Currency,
		Mana: o.Mana, Status: o.Status, Reason: o.Reason, CreatedAt: o.CreatedAt, FulfilledAt: o.FulfilledAt,
		CheckoutURL: o.CheckoutURL, RefundedAmount: o.RefundedAmount, ClawedBackMana: o.ClawedBackMana}
}

// createCheckout creates the order and opens its provider checkout. It
// runs outside any transaction (see checkout.Service.Open): the order is
// committed first, keyed by the request's Idempotency-Key, so a retry after
// a 503 resumes the same order instead of creating a second one.
func (a *api) createCheckout(w http.ResponseWriter, r *http.Request) error {
	player, _ := playerID(r)
	var body struct {
		SKU      string `json:"sku"`
		Provider string `json:"provider"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	key, _ := idempotency.KeyFromContext(r.Context())
	o, err := a.checkouts.Open(r.Context(), a.pool, fulfillment.CheckoutParams{
		PlayerID: player, SKU: body.SKU, Provider: body.Provider, Key: key,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, viewOrder(o))
}

// writeOutsideTx adapts a mutating handler that calls a provider: it runs
// outside a transaction, with its answer stored under the Idempotency-Key.
func (a *api) writeOutsideTx(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return a.jsonOnly(a.idem.WrapOutsideTx(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			a.writeError(w, r, err)
		}
	}))
}

// orderDetail is GET /v1/orders/{id}: the order and every payment
// received for it, so that an integrator can answer "was I charged twice?"
// without an operator.
type orderDetail struct {
	*orderView
	Payments []paymentView `json:"payments"`
}

// paymentView is one provider payment of an order (fulfillment.PaymentView).
type paymentView struct {
	Provider       string         `json:"provider"`
	PaymentID      string         `json:"payment_id"`
	Amount         int64          `json:"amount"`
	Currency       string         `json:"currency"`
	Status         string         `json:"status"`
	RefundedAmount int64          `json:"refunded_amount"`
	Mana           int64          `json:"mana"`
	CreatedAt      time.Time      `json:"created_at"`
	Reversals      []reversalView `json:"reversals"`
}

// reversalView is one accepted refund or dispute of a payment.
type reversalView struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	State     string    `json:"state"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func viewPayments(ps []fulfillment.PaymentView) []paymentView {
	out := make([]paymentView, len(ps))
	for i, v := range ps {
		p := v.Payment
		out[i] = paymentView{Provider: p.Provider, PaymentID: p.PaymentID, Amount: p.Amount, Currency: p.Currency,
			Status: v.Status, RefundedAmount: v.RefundedAmount, Mana: p.ManaMinted, CreatedAt: p.CreatedAt,
			Reversals: make([]reversalView, len(v.Reversals))}
		for j, f := range v.Reversals {
			out[i].Reversals[j] = reversalView{ID: f.ReversalID, Kind: f.Kind, State: f.State, Amount: f.Amount,
				Currency: f.Currency, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt}
		}
	}
	return out
}

func (a *api) getOrder(w http.ResponseWriter, r *http.Request, player int64) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	// One snapshot, so the order's status and refunded_amount agree with
	// the payments listed under it.
	var detail orderDetail
	err = pgx.BeginTxFunc(r.Context(), a.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			o, err := fulfillment.GetOrder(r.Context(), tx, player, id)
			if err != nil {
				return err
			}
			ps, err := fulfillment.OrderPayments(r.Context(), tx, o.ID)
			detail = orderDetail{orderView: viewOrder(o), Payments: viewPayments(ps)}
			return err
		})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, detail)
}
