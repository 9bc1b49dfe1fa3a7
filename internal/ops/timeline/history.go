package timeline

import (
	"context"
	"slices"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/wallet"
)

// history is every row a timeline is made of: a set of orders and what
// their payments, events, jobs and wallet transactions left, plus events
// that name ids of no known payment.
type history struct {
	orders     []*orderRow
	apiKeys    []*apiKeyRow
	payments   []*paymentRow
	events     []*eventRow
	facts      []*factRow
	deliveries []*deliveryRow
	jobs       []*jobRow
	txs        []*txRow
	debt       *debtState // nil: nothing in this history opened or settled debt
	// searched is the provider id a payment timeline was asked for.
	searched string
	// player is the player a player timeline is about.
	player int64
}

// loadHistory reads orders orderIDs and everything around them, and the
// events and jobs that name refs (ids with no payment yet).
func loadHistory(ctx context.Context, q dbtx.DB, orderIDs []int64, refs []ref) (*history, error) {
	h := &history{}
	var err error
	steps := []func() error{
		func() error { h.orders, err = loadOrders(ctx, q, orderIDs); return err },
		func() error { h.payments, err = loadPayments(ctx, q, orderIDs); return err },
		func() error { refs = append(refs, h.aliasRefs()...); return nil },
		func() error { h.events, err = loadEvents(ctx, q, h.paymentIDs(), refs); return err },
		func() error { h.facts, err = loadFacts(ctx, q, h.paymentIDs()); return err },
		func() error { h.deliveries, err = loadDeliveries(ctx, q, orderIDs, h.eventRefs(), refs); return err },
		func() error { h.jobs, err = loadJobs(ctx, q, h.eventRefs(), refs); return err },
		func() error { return h.loadUnworked(ctx, q) },
		func() error { h.apiKeys, err = loadAPIKeys(ctx, q, h.orders); return err },
		func() error { h.txs, err = loadTxs(ctx, q, h.orderKeys(), h.paymentIDs()); return err },
		func() error { return h.loadDebt(ctx, q) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (h *history) paymentIDs() []int64 {
	ids := make([]int64, len(h.payments))
	for i, p := range h.payments {
		ids[i] = p.ID
	}
	return ids
}

func (h *history) aliasRefs() []ref {
	var out []ref
	for _, p := range h.payments {
		for _, a := range p.Aliases {
			out = append(out, ref{p.Provider, a})
		}
	}
	return out
}

// eventRefs are the claim keys of every event the history knows of: the
// deliveries', the reversal events' and the jobs'.
func (h *history) eventRefs() []ref {
	var out []ref
	add := func(r ref) {
		if r.id != "" && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, d := range h.deliveries {
		add(ref{d.Provider, d.EventID})
	}
	for _, e := range h.events {
		add(ref{e.Provider, e.EventID})
	}
	for _, j := range h.jobs {
		add(ref{j.Args.Provider, j.Args.EventID})
	}
	return out
}

// loadUnworked reads the deliveries of reversal jobs not worked yet:
// found by the payment id their args name, before any reversal event
// row names their event.
func (h *history) loadUnworked(ctx context.Context, q dbtx.DB) error {
	var missing []ref
	for _, j := range h.jobs {
		r := ref{j.Args.Provider, j.Args.EventID}
		if !slices.ContainsFunc(h.deliveries, func(d *deliveryRow) bool { return d.Provider == r.provider && d.EventID == r.id }) {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	more, err := loadDeliveries(ctx, q, nil, missing, nil)
	h.deliveries = append(h.deliveries, more...)
	return err
}

// orderKeys are the wallet keys an order's fulfilment posts under: the
// credit and the debt it settles.
func (h *history) orderKeys() []string {
	var keys []string
	for _, o := range h.orders {
		k := wallet.FulfilmentKey(o.ID)
		keys = append(keys, k.String(), k.Settlement().String())
	}
	return keys
}

// loadDebt reads the player's debt from the first leg of it in this
// history on: the debt it opened, and how it was settled or forgiven.
func (h *history) loadDebt(ctx context.Context, q dbtx.DB) error {
	for _, t := range h.txs {
		if isDebtKind(t.Kind) {
			d, err := loadDebt(ctx, q, t.PlayerID, t.ID, t.CreatedAt)
			h.debt = d
			return err
		}
	}
	return nil
}

func isDebtKind(kind string) bool {
	switch wallet.Kind(kind) {
	case wallet.KindDebt, wallet.KindDebtSettlement, wallet.KindDebtWriteOff:
		return true
	}
	return false
}

// paymentsOf returns the payments of order id.
func (h *history) paymentsOf(orderID int64) []*paymentRow {
	var out []*paymentRow
	for _, p := range h.payments {
		if p.OrderID == orderID {
			out = append(out, p)
		}
	}
	return out
}

// payment returns payment row id, or nil.
func (h *history) payment(id int64) *paymentRow {
	for _, p := range h.payments {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// eventsOf returns the reversal events decided against payment p, or
// naming one of its ids.
func (h *history) eventsOf(p *paymentRow) []*eventRow {
	var out []*eventRow
	for _, e := range h.events {
		if e.Payment == p.ID || (e.Payment == 0 && e.Provider == p.Provider &&
			(slices.Contains(p.Aliases, e.PaymentRef) || slices.Contains(p.Aliases, e.OtherRef))) {
			out = append(out, e)
		}
	}
	return out
}

// factsOf returns payment p's facts.
func (h *history) factsOf(p *paymentRow) []*factRow {
	var out []*factRow
	for _, f := range h.facts {
		if f.Payment == p.ID {
			out = append(out, f)
		}
	}
	return out
}

// jobsOfEvent returns the jobs a claimed event enqueued.
func (h *history) jobsOfEvent(provider, eventID string) []*jobRow {
	var out []*jobRow
	for _, j := range h.jobs {
		if j.Args.Provider == provider && j.Args.EventID == eventID {
			out = append(out, j)
		}
	}
	return out
}
