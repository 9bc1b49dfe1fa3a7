package sim

// Rendering: a step becomes the provider's own event, built with
// providerevents (the providers' shapes, from their SDKs' types) and edited
// where the alphabet needs what providerevents does not build.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
)

// payID is the provider's id of payment pay of order o: the one
// providerevents gives the order, or a distinct one.
func (r *run) payID(o, pay int) string {
	ord := strconv.FormatInt(r.orders[o].ID, 10)
	name := r.h.Orders[o].Provider
	if pay == 0 {
		return providerevents.OrderPaymentID(name, ord)
	}
	prefix := map[string]string{stripeName: "pi", paddleName: "txn", creemName: "ord"}[name]
	return fmt.Sprintf("%s_dup%d_order_%s", prefix, pay, ord)
}

// identity is the payment's own id as billing records it (Stripe's
// Checkout Session).
func (r *run) identity(o, pay int) string {
	if r.h.Orders[o].Provider != stripeName {
		return r.payID(o, pay)
	}
	if pay == 0 {
		return stripeevents.OrderSessionID(strconv.FormatInt(r.orders[o].ID, 10))
	}
	return "cs_test_" + r.payID(o, pay)
}

// payKeys maps each payment's recorded id to its PayKey.
func (r *run) payKeys() map[string]string {
	out := map[string]string{}
	for _, s := range r.h.Steps {
		if s.Op == OpPay {
			out[r.identity(s.Order, s.Pay)] = PayKey(s.Order, s.Pay)
		}
	}
	return out
}

func (r *run) render(s Step, ev string) ([]byte, error) {
	name := r.h.Orders[s.Order].Provider
	switch s.Op {
	case OpPay, OpUnpaid:
		return r.renderPay(s, ev)
	case OpIgnored:
		return r.renderIgnored(s, ev)
	}
	ref := r.payID(s.Order, s.Pay)
	if s.Op == OpGhost {
		ref += "_ghost"
	}
	kind, state := fulfillment.ReversalRefund, fulfillment.StateSucceeded
	id := fmt.Sprintf("re_%s_f%d", ref, s.Fact)
	switch {
	case s.Op == OpDispute:
		kind, state, id = fulfillment.ReversalDispute, s.State, fmt.Sprintf("dp_%s_f%d", ref, s.Fact)
		if state == "inquiry" {
			state = fulfillment.StateOpen
		}
	case name == stripeName:
		id = "ch_" + ref // Stripe's refund fact is the charge's cumulative amount_refunded
	}
	body := providerevents.ReversalEvent(name, ev, ref, id, kind, state, s.Amount, s.Cur)
	if body == nil {
		return nil, fmt.Errorf("providerevents builds no %s %s %s", name, kind, state)
	}
	obj := func(m map[string]any) map[string]any { return object(name, m) }
	switch {
	case s.State == "inquiry":
		return editJSON(body, func(m map[string]any) { obj(m)["status"] = "warning_needs_response" })
	case s.Op == OpBad:
		return editJSON(body, func(m map[string]any) { malform(name, s.Bad, obj(m)) })
	}
	return body, nil
}

// object is the event's payload object.
func object(name string, m map[string]any) map[string]any {
	switch name {
	case creemName:
		return m["object"].(map[string]any)
	case paddleName:
		return m["data"].(map[string]any)
	}
	return m["data"].(map[string]any)["object"].(map[string]any)
}

// malform breaks a refund as the alphabet says: a negative or fractional
// amount, or no id.
func malform(name, how string, o map[string]any) {
	field := map[string]string{stripeName: "amount_refunded", creemName: "refund_amount"}[name]
	switch {
	case how == "noid":
		o["id"] = ""
	case name == paddleName:
		o["totals"].(map[string]any)["total"] = map[string]string{"negative": "-5", "fraction": "12.5"}[how]
	case how == "negative":
		o[field] = json.Number("-5")
	default:
		o[field] = json.Number("12.5")
	}
}

func (r *run) renderPay(s Step, ev string) ([]byte, error) {
	name := r.h.Orders[s.Order].Provider
	o := r.orders[s.Order]
	body := providerevents.PaymentEvent(name, ev, r.payID(s.Order, s.Pay), o.ID, o.Amount, o.Currency)
	if name != stripeName {
		return body, nil
	}
	return editJSON(body, func(m map[string]any) {
		session := m["data"].(map[string]any)["object"].(map[string]any)
		if !s.Alias || s.Op == OpUnpaid {
			session["payment_intent"] = nil
		}
		if s.Op == OpUnpaid {
			session["payment_status"] = "unpaid"
		}
		if s.Async {
			m["type"] = "checkout.session.async_payment_succeeded"
		}
	})
}

// renderIgnored is an event the provider sends that moves no money.
func (r *run) renderIgnored(s Step, ev string) ([]byte, error) {
	name := r.h.Orders[s.Order].Provider
	pay := r.payID(s.Order, s.Pay)
	switch name {
	case stripeName:
		body := providerevents.ReversalEvent(name, ev, pay, "dp_upd_"+pay, fulfillment.ReversalDispute, fulfillment.StateOpen, 999, usd)
		return editJSON(body, func(m map[string]any) { m["type"] = "charge.dispute.updated" })
	case paddleName:
		body := providerevents.ReversalEvent(name, ev, pay, "adj_pending_"+ev, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, usd)
		return editJSON(body, func(m map[string]any) {
			m["data"].(map[string]any)["status"] = []string{"pending_approval", "rejected"}[len(ev)%2]
		})
	}
	body := providerevents.CompletedEvent(name, ev, r.orders[s.Order].ID, 1, usd)
	return editJSON(body, func(m map[string]any) { m["eventType"] = "subscription.paid" })
}

// editJSON edits body as a map, keeping integers exact (json.Number).
func editJSON(body []byte, edit func(map[string]any)) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("edit event: %w", err)
	}
	edit(m)
	return json.Marshal(m)
}
