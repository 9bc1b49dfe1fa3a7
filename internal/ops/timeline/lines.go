package timeline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
)

// layerRank orders lines of one instant: rows one transaction writes share
// its start time, and the effect follows its cause. The ledger's layers
// rank alike: their transactions follow each other in id order.
var layerRank = map[string]int{LayerCheckout: 0, LayerDelivery: 1, LayerJob: 2, LayerPayment: 3, LayerReversal: 4,
	LayerFact: 5, LayerWallet: 6, LayerDebt: 6, LayerOperator: 6}

// lines turns every row of h into its line, oldest first.
func (h *history) lines() []Line {
	var out []Line
	for _, o := range h.orders {
		out = append(out, h.orderLine(o))
	}
	for _, d := range h.deliveries {
		out = append(out, h.deliveryLine(d))
	}
	for _, j := range h.jobs {
		out = append(out, jobLine(j))
	}
	for _, p := range h.payments {
		out = append(out, h.paymentLines(p)...)
	}
	for _, e := range h.events {
		out = append(out, h.eventLine(e))
	}
	for _, f := range h.facts {
		out = append(out, h.factLine(f))
	}
	out = append(out, h.ledgerLines()...)
	sortLines(out)
	return out
}

func sortLines(ls []Line) {
	slices.SortStableFunc(ls, func(a, b Line) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Refs.TransactionID, b.Refs.TransactionID)
	})
}

// rank is the line's layerRank; a ledger line without a transaction (an
// operator's forgiveness) follows the transactions it made.
func rank(l Line) int {
	if r := layerRank[l.Layer]; r < layerRank[LayerWallet] || l.Refs.TransactionID != 0 {
		return r
	}
	return layerRank[LayerWallet] + 1
}

func (h *history) orderLine(o *orderRow) Line {
	l := Line{At: o.CreatedAt, Layer: LayerCheckout, Type: "order_opened", Refs: Refs{OrderID: o.ID, PlayerID: o.PlayerID,
		Provider: o.Provider, ProviderID: o.CheckoutID}}
	l.Text = fmt.Sprintf("Order %d opened for player %d: %s, %s for %s through %s", o.ID, o.PlayerID, o.SKU,
		money(o.Amount, o.Currency), units(o.Mana, "mana"), o.Provider)
	if o.CheckoutID == "" {
		l.Text += "; no provider checkout stored"
	} else {
		l.Text += "; checkout " + o.CheckoutID
		l.Details = append(l.Details, "checkout URL: "+o.CheckoutURL)
	}
	if o.CheckoutKey != "" {
		l.Keys = append(l.Keys, Key{KeyAPI, o.CheckoutKey})
	}
	if simulated(o.CheckoutID) {
		l.Details = append(l.Details, "a simulated checkout page (billing dev): no provider was called")
	}
	if k := h.apiKey(o); k != nil {
		l.Details = append(l.Details, apiKeyDetail(k))
	}
	return l
}

// simulated reports whether checkoutID is billing dev's simulated page's
// (devcheckout.Simulated): no provider was called, so none keyed it.
func simulated(checkoutID string) bool {
	return strings.HasPrefix(checkoutID, provider.SimulatedCheckout)
}

// addCheckoutKeys adds to each order line of t the key the order's
// provider's driver sent with its checkout, in the form its facts give
// (none for a provider that takes none, or a simulated checkout).
func addCheckoutKeys(t *Timeline, reg *provider.Registry) *Timeline {
	for i := range t.Lines {
		l := &t.Lines[i]
		if l.Type != "order_opened" || l.Refs.ProviderID == "" || simulated(l.Refs.ProviderID) {
			continue
		}
		p, ok := reg.Get(l.Refs.Provider)
		if !ok {
			continue
		}
		k := p.Facts().CheckoutKey
		if key := k.For(l.Refs.OrderID); key != "" {
			kind := KeyProvider
			if k.Field != "Idempotency-Key" {
				kind = l.Refs.Provider + " " + k.Field // what the checkout carries instead
			}
			l.Keys = append(l.Keys, Key{kind, key})
		}
	}
	return t
}

func (h *history) apiKey(o *orderRow) *apiKeyRow {
	for _, k := range h.apiKeys {
		if k.PlayerID == o.PlayerID && k.Key == o.CheckoutKey {
			return k
		}
	}
	return nil
}

func apiKeyDetail(k *apiKeyRow) string {
	s := "POST /v1/checkouts under this Idempotency-Key: " + k.Status
	if k.ResponseStatus != nil {
		s += fmt.Sprintf(", answered %d", *k.ResponseStatus)
	}
	if k.Replays > 0 {
		s += ", replayed " + plural(int(k.Replays), "time")
	}
	return s + " (the replay cache keeps it 24 hours)"
}

func (h *history) deliveryLine(d *deliveryRow) Line {
	l := Line{At: d.ClaimedAt, Layer: LayerDelivery, Type: "delivery_claimed", Keys: []Key{{KeyEvent, d.EventID}},
		Refs: Refs{Provider: d.Provider}, Duplicates: d.Duplicates, LastDelivery: d.LastDelivery}
	l.Text = fmt.Sprintf("%s %s %s claimed", titled(d.Provider), d.EventType, d.EventID)
	if d.OrderID != nil {
		l.Refs.OrderID = *d.OrderID
		l.Text += fmt.Sprintf(": paid %s for order %d", money(*d.PaidAmount, d.PaidCurrency), *d.OrderID)
	}
	if d.Duplicates == 0 || d.LastDelivery == nil {
		l.Text += "; delivered once"
	} else {
		l.Text += fmt.Sprintf("; %s followed, the last at %s, each answered as a duplicate",
			plural(int(d.Duplicates), "duplicate delivery"), stamp(*d.LastDelivery))
	}
	jobs := h.jobsOfEvent(d.Provider, d.EventID)
	if len(jobs) == 0 && d.Outcome != "ignored" && d.Outcome != "refused" {
		l.Details = append(l.Details, "its job is no longer retained (River deletes finished jobs after its retention period)")
	}
	l.Details = append(l.Details, outcomeDetail(d, jobs))
	return l
}

// outcomeDetail says what became of a claimed event (invariant 11).
func outcomeDetail(d *deliveryRow, jobs []*jobRow) string {
	switch d.Outcome {
	case "applied":
		return "outcome: applied, made " + d.OutcomeRef
	case "refused":
		return "outcome: refused: " + d.OutcomeReason
	case "ignored":
		return "outcome: ignored (a type billing only acknowledges)"
	case "waiting":
		return "outcome: waiting for its payment (refused after 72 hours if the payment stays unknown)"
	}
	for _, j := range jobs {
		if j.State != "cancelled" && j.State != "discarded" && j.State != "completed" {
			return "outcome: not decided yet; its job is " + j.State
		}
	}
	return "outcome: NONE and no live job: its job ended before deciding (billing webhooks redrive)"
}

// jobStates says what each River state means for the operator, and flags.
var jobStates = map[string]struct{ text, flag string }{
	"available": {"waiting to run", FlagPending},
	"pending":   {"pending", FlagPending},
	"scheduled": {"scheduled", FlagPending},
	"running":   {"running", FlagPending},
	"retryable": {"failed, will retry", FlagRetrying},
	"completed": {"completed", ""},
	"cancelled": {"cancelled", FlagCancelled},
	"discarded": {"discarded: it ran out of attempts", FlagFailed},
}

func jobLine(j *jobRow) Line {
	st := jobStates[j.State]
	l := Line{At: j.CreatedAt, Layer: LayerJob, Type: "job", Flag: st.flag, Attempts: j.Errors, RiverUI: RiverUIPath(j.ID),
		Keys: []Key{{KeyEvent, j.Args.EventID}}, Refs: Refs{JobID: j.ID, OrderID: j.Args.OrderID, Provider: j.Args.Provider}}
	l.Text = fmt.Sprintf("%s job %d %s", j.Kind, j.ID, st.text)
	switch {
	case j.FinalizedAt != nil:
		l.Text += fmt.Sprintf(" at %s after %s", stamp(*j.FinalizedAt), plural(j.Attempt, "attempt"))
	case j.State == "retryable" || j.State == "scheduled":
		l.Text += fmt.Sprintf(" (attempt %d of %d done; next at %s)", j.Attempt, j.MaxAttempts, stamp(j.ScheduledAt))
	}
	for _, a := range j.Errors {
		l.Details = append(l.Details, fmt.Sprintf("attempt %d at %s: %s", a.Attempt, stamp(a.At), a.Error))
	}
	return l
}

func (h *history) paymentLines(p *paymentRow) []Line {
	refs := Refs{OrderID: p.OrderID, Payment: p.ID, PlayerID: p.PlayerID, Provider: p.Provider, ProviderID: p.PaymentID}
	l := Line{At: p.CreatedAt, Layer: LayerPayment, Keys: []Key{{KeyPayment, p.PaymentID}}, Refs: refs}
	if p.Status == fulfillment.PaymentApplied {
		l.Type = "payment_applied"
		l.Text = fmt.Sprintf("Payment %s of %s recorded for order %d: minted %s", p.PaymentID, money(p.Amount, p.Currency),
			p.OrderID, units(p.Minted, "mana"))
	} else {
		l.Type = "payment_unapplied"
		l.Text = fmt.Sprintf("Payment %s of %s recorded UNAPPLIED for order %d, minted nothing: %s", p.PaymentID,
			money(p.Amount, p.Currency), p.OrderID, p.Reason)
		if p.Status == fulfillment.PaymentUnapplied {
			l.Flag = FlagUnapplied
		}
	}
	if len(p.Aliases) > 1 {
		l.Details = append(l.Details, "also known as "+strings.Join(p.Aliases[1:], ", "))
	}
	if p.ClawedBack > 0 || p.Steps > 0 {
		l.Details = append(l.Details, fmt.Sprintf("clawed back now: %s of %s, in %s", units(p.ClawedBack, "mana"),
			units(p.Minted, "mana"), plural(int(p.Steps), "step")))
	}
	if p.Status != fulfillment.PaymentRefunded {
		return []Line{l}
	}
	return []Line{l, h.refundLine(p, refs)}
}

// refundLine is the refund of an unapplied payment: automatic (the
// fulfilment job's error says so) or marked by an operator.
func (h *history) refundLine(p *paymentRow, refs Refs) Line {
	l := Line{At: p.UpdatedAt, Layer: LayerPayment, Type: "payment_refunded", Refs: refs,
		Keys: []Key{{KeyProvider, fulfillment.RefundKey(p.ID)}}}
	how := "refund id " + p.RefundID
	for _, j := range h.jobsOfEvent(p.Provider, p.EventID) {
		if last := lastError(j); strings.Contains(last, "refunded automatically") {
			how = "refunded automatically through " + p.Provider + " as " + p.RefundID
		} else if strings.Contains(last, "REFUND IT") {
			how = "refunded by hand and marked (billing payments mark-refunded) as " + p.RefundID
			l.Keys = nil
		}
	}
	l.Text = fmt.Sprintf("Payment %s refunded to the customer: %s", p.PaymentID, how)
	return l
}

func lastError(j *jobRow) string {
	if len(j.Errors) == 0 {
		return ""
	}
	return j.Errors[len(j.Errors)-1].Error
}

func (h *history) eventLine(e *eventRow) Line {
	l := Line{At: e.ReceivedAt, Layer: LayerReversal, Keys: []Key{{KeyEvent, e.EventID}},
		Refs: Refs{Payment: e.Payment, Provider: e.Provider, ProviderID: e.ReversalID}}
	what := fmt.Sprintf("%s %s %s of %s, %s", titled(e.Provider), e.Kind, e.ReversalID, money(e.Amount, e.Currency), e.State)
	p := h.payment(e.Payment)
	switch {
	case e.Status == fulfillment.EventRefused:
		l.Type, l.Flag = "reversal_refused", FlagRefused
		l.Text = what + ": REFUSED (" + e.Reason + "); it changed nothing"
	case e.Status == fulfillment.EventPending:
		l.Type, l.Flag = "reversal_pending", FlagPending
		l.Text = what + ": pending, waiting for payment " + e.PaymentRef + " to be known"
	default:
		l.Type = "reversal_accepted"
		l.Text = what + ": accepted"
	}
	if p != nil {
		l.Refs.OrderID = p.OrderID
		l.Text += " (payment " + p.PaymentID + ")"
	}
	names := "names payment " + e.PaymentRef
	if e.OtherRef != "" {
		names += " and " + e.OtherRef
	}
	l.Details = append(l.Details, names)
	if e.DecidedAt != nil {
		l.Details = append(l.Details, "decided at "+stamp(*e.DecidedAt))
	}
	return l
}

func (h *history) factLine(f *factRow) Line {
	l := Line{At: f.UpdatedAt, Layer: LayerFact, Type: "fact", Keys: []Key{{KeyReversal, f.ReversalID}},
		Refs: Refs{Payment: f.Payment, Provider: f.Provider, ProviderID: f.ReversalID}}
	of := ""
	if p := h.payment(f.Payment); p != nil {
		of, l.Refs.OrderID = " of payment "+p.PaymentID, p.OrderID
	}
	l.Text = fmt.Sprintf("%s %s%s stands at %s, %s", titled(f.Kind), f.ReversalID, of, money(f.Amount, f.Currency), f.State)
	return l
}
