package timeline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/wallet"
)

// verdict is the paragraph on top of a timeline.
type verdict struct {
	headline  string
	sentences []string
	attention bool
}

func (v *verdict) add(s ...string) {
	for _, x := range s {
		if x != "" {
			v.sentences = append(v.sentences, x)
		}
	}
}

// text joins the sentences into the paragraph.
func (v verdict) text() string { return strings.Join(v.sentences, " ") }

// orderVerdict says what became of order o and its payments.
func (h *history) orderVerdict(o *orderRow) verdict {
	pays := h.paymentsOf(o.ID)
	v := h.paidVerdict(o, pays)
	for _, p := range pays {
		rv := h.reversalVerdict(p)
		v.add(rv.sentences...)
		v.attention = v.attention || rv.attention
	}
	v.add(h.deliverySentence(o))
	h.jobVerdict(&v)
	return v
}

// paidVerdict is the first sentence: paid once, twice, refused, not paid.
func (h *history) paidVerdict(o *orderRow, pays []*paymentRow) verdict {
	var applied *paymentRow
	var others []*paymentRow
	for _, p := range pays {
		if p.Status == fulfillment.PaymentApplied && applied == nil {
			applied = p
		} else {
			others = append(others, p)
		}
	}
	switch {
	case len(pays) == 0:
		return h.unpaidVerdict(o)
	case applied == nil:
		return h.nothingMinted(o, others)
	}
	v := verdict{headline: "Paid once"}
	first := fmt.Sprintf("payment %s (%s) minted %s on %s", h.name(applied), money(applied.Amount, applied.Currency),
		units(applied.Minted, "mana"), minute(applied.CreatedAt))
	if len(others) == 0 {
		v.add("Paid once: " + first + ".")
		return v
	}
	v.headline = "Paid twice"
	if len(pays) > 2 {
		v.headline = fmt.Sprintf("Paid %d times", len(pays))
	}
	parts := []string{first}
	for _, p := range others {
		phrase, todo := h.refundPhrase(p)
		parts = append(parts, fmt.Sprintf("payment %s (%s) for the same order minted nothing and %s", h.name(p),
			money(p.Amount, p.Currency), phrase))
		v.attention = v.attention || todo
	}
	v.add(v.headline + ": " + strings.Join(parts, "; ") + ".")
	return v
}

// nothingMinted: every payment of o minted nothing (the order refused them).
func (h *history) nothingMinted(o *orderRow, pays []*paymentRow) verdict {
	v := verdict{headline: "Paid, nothing minted"}
	lead := "Paid, nothing minted: "
	if o.Status == fulfillment.StatusRejected {
		v.headline, lead = "Payment refused", fmt.Sprintf("Payment refused: order %d was rejected (%s); ", o.ID, o.Reason)
	}
	var parts []string
	for _, p := range pays {
		phrase, todo := h.refundPhrase(p)
		parts = append(parts, fmt.Sprintf("payment %s (%s) minted nothing and %s", h.name(p), money(p.Amount, p.Currency), phrase))
		v.attention = v.attention || todo
	}
	v.add(lead + strings.Join(parts, "; ") + ".")
	return v
}

// refundPhrase says what became of an unapplied payment's money, and
// whether an operator must act. The provider's own accepted refunds of it
// count: one refunded in full is refunded, whoever refunded it, and one
// refunded in part is still to refund for the rest only.
func (h *history) refundPhrase(p *paymentRow) (string, bool) {
	switch {
	case p.Status == fulfillment.PaymentRefunded:
		return fmt.Sprintf("was refunded (%s) on %s", p.RefundID, minute(p.UpdatedAt)), false
	case p.Amount <= 0:
		return "had nothing to refund", false
	}
	var refunded int64
	var ids []string
	for _, f := range h.factsOf(p) {
		if f.Kind == fulfillment.ReversalRefund {
			refunded += min(max(f.Amount, 0), p.Amount-refunded) // capped: never above what it paid
			ids = append(ids, f.ReversalID)
		}
	}
	todo := fmt.Sprintf("refund it at %s, then run billing payments mark-refunded --payment %d --refund-id <refund id>",
		p.Provider, p.ID)
	switch {
	case refunded >= p.Amount:
		return fmt.Sprintf("was refunded in full by %s (%s)", p.Provider, strings.Join(ids, ", ")), false
	case refunded > 0:
		return fmt.Sprintf("was refunded %s by %s (%s); the other %s is NOT refunded yet: %s", money(refunded, p.Currency),
			p.Provider, strings.Join(ids, ", "), money(p.Amount-refunded, p.Currency), todo), true
	}
	return "is NOT refunded yet: " + todo, true
}

func (h *history) unpaidVerdict(o *orderRow) verdict {
	for _, d := range h.deliveries {
		if d.OrderID == nil || *d.OrderID != o.ID {
			continue
		}
		v := verdict{headline: "Paid, not applied yet", attention: true}
		s := fmt.Sprintf("Paid, not applied yet: %s reported the payment (%s) at %s", d.Provider, d.EventID, minute(d.ClaimedAt))
		jobs := h.jobsOfEvent(d.Provider, d.EventID)
		if len(jobs) == 0 {
			v.add(s + "; its job is no longer retained.")
			return v
		}
		j := jobs[len(jobs)-1]
		s += fmt.Sprintf("; its %s job %d is %s", j.Kind, j.ID, jobStates[j.State].text)
		if e := lastError(j); e != "" {
			s += " (last error: " + e + ")"
		}
		v.add(s + ".")
		return v
	}
	v := verdict{headline: "Not paid"}
	with := ""
	if o.CheckoutID != "" {
		with = " with " + o.Provider + " checkout " + o.CheckoutID
	}
	v.add(fmt.Sprintf("Not paid: order %d was opened on %s%s and no payment has arrived.", o.ID, minute(o.CreatedAt), with))
	return v
}

// name is how the verdict names a payment: its provider id, with the id
// the operator searched by when that is another of its aliases.
func (h *history) name(p *paymentRow) string {
	if h.searched != "" && h.searched != p.PaymentID && slices.Contains(p.Aliases, h.searched) {
		return p.PaymentID + " (" + h.searched + ")"
	}
	return p.PaymentID
}

// reversalVerdict says what p's refunds and disputes did.
func (h *history) reversalVerdict(p *paymentRow) verdict {
	var v verdict
	facts := h.factsOf(p)
	var refunded int64
	var refunds []string
	for _, f := range facts {
		if f.Kind == fulfillment.ReversalRefund {
			refunded, refunds = refunded+f.Amount, append(refunds, f.ReversalID)
		} else {
			v.add(h.disputeSentence(p, f))
		}
	}
	if refunded > 0 {
		how := "in full"
		if refunded < p.Amount {
			how = "in part"
		}
		v.sentences = append([]string{fmt.Sprintf("Refunded %s: %s of %s went back (%s).", how, money(refunded, p.Currency),
			money(p.Amount, p.Currency), strings.Join(refunds, ", "))}, v.sentences...)
	}
	switch {
	case len(facts) > 0 && p.Minted > 0:
		v.add(fmt.Sprintf("Clawed back: %s of the %s it minted.", units(p.ClawedBack, "mana"), units(p.Minted, "mana")))
	case len(facts) > 0:
		v.add("It minted nothing, so nothing was clawed back.")
	}
	h.eventProblems(p, &v)
	return v
}

func (h *history) disputeSentence(p *paymentRow, f *factRow) string {
	opened := f.CreatedAt
	for _, e := range h.eventsOf(p) {
		if e.ReversalID == f.ReversalID && e.Status == fulfillment.EventAccepted && e.ReceivedAt.Before(opened) {
			opened = e.ReceivedAt
		}
	}
	s := fmt.Sprintf("Dispute %s (%s) opened on %s", f.ReversalID, money(f.Amount, f.Currency), minute(opened))
	switch f.State {
	case fulfillment.StateWon:
		return s + fmt.Sprintf(" and was won on %s: what it took back was given back.", minute(f.UpdatedAt))
	case fulfillment.StateLost:
		return s + fmt.Sprintf(" and was lost on %s: the money stays with the customer.", minute(f.UpdatedAt))
	}
	return s + " and is still open: what it took back stays taken until it closes."
}

// eventProblems adds the refused and pending events of p.
func (h *history) eventProblems(p *paymentRow, v *verdict) {
	for _, e := range h.eventsOf(p) {
		switch e.Status {
		case fulfillment.EventRefused:
			v.add(fmt.Sprintf("A %s event (%s, %s) was refused: %s; it changed nothing, check it with %s.", e.Kind,
				e.EventID, money(e.Amount, e.Currency), e.Reason, e.Provider))
			v.attention = true
		case fulfillment.EventPending:
			v.add(fmt.Sprintf("A %s event (%s) waits for its payment %s.", e.Kind, e.EventID, e.PaymentRef))
			v.attention = true
		}
	}
}

// deliverySentence counts o's provider deliveries and their duplicates,
// when there were any.
func (h *history) deliverySentence(o *orderRow) string {
	var events, dups int
	for _, d := range h.deliveries {
		if !h.deliveryOf(d, o) {
			continue
		}
		events++
		dups += int(d.Duplicates)
	}
	if dups == 0 {
		return ""
	}
	return fmt.Sprintf("The providers delivered %s %d times; each was claimed once and the %s answered without effect.",
		plural(events, "event"), events+dups, plural(dups, "duplicate"))
}

// deliveryOf reports whether d is about order o: its payment event, or a
// refund or dispute event of one of its payments.
func (h *history) deliveryOf(d *deliveryRow, o *orderRow) bool {
	if d.OrderID != nil {
		return *d.OrderID == o.ID
	}
	for _, e := range h.events {
		if e.Provider == d.Provider && e.EventID == d.EventID {
			p := h.payment(e.Payment)
			return p != nil && p.OrderID == o.ID
		}
	}
	return false
}

// jobVerdict adds every job that failed and is not done.
func (h *history) jobVerdict(v *verdict) {
	for _, j := range h.jobs {
		switch j.State {
		case "retryable", "discarded":
			v.add(fmt.Sprintf("Job %d (%s) is %s after %s: last error %q; see it in River UI (%s).", j.ID, j.Kind,
				j.State, plural(j.Attempt, "attempt"), lastError(j), RiverUIPath(j.ID)))
			v.attention = true
		}
	}
}

// debtVerdict says what debt this history settled or opened, and what
// became of it since.
func (h *history) debtVerdict(v *verdict) {
	if h.debt == nil {
		return
	}
	var opened, settledBefore int64
	var first *txRow
	for _, t := range h.txs {
		switch wallet.Kind(t.Kind) {
		case wallet.KindDebt:
			opened += t.Amount
			if first == nil {
				first = t
			}
		case wallet.KindDebtSettlement:
			if first == nil {
				settledBefore -= t.Amount
			}
		}
	}
	if settledBefore > 0 {
		v.add(fmt.Sprintf("Its Mana first paid %s of the player's earlier debt.", units(settledBefore, "mana")))
	}
	if first == nil {
		return
	}
	s := fmt.Sprintf("The clawback left %s of debt", units(opened, "mana"))
	if settled := h.settledSince(first.ID); settled > 0 {
		s += fmt.Sprintf("; later credits settled %s of the player's debt", units(settled, "mana"))
	}
	for _, f := range h.debt.Forgiven {
		if f.Mana > 0 {
			s += fmt.Sprintf("; %s forgiven on %s (key %s: %s)", units(f.Mana, "mana"), minute(f.CreatedAt), f.Key, f.Reason)
		}
	}
	if h.debt.Outstanding > 0 {
		s += fmt.Sprintf("; the player still owes %s", units(h.debt.Outstanding, "mana"))
		v.attention = true
	} else {
		s += "; nothing is owed now"
	}
	v.add(s + ".")
}

// settledSince is the debt the player's credits settled after
// transaction id.
func (h *history) settledSince(id int64) int64 {
	var n int64
	for _, t := range h.debt.Legs {
		if t.ID > id && wallet.Kind(t.Kind) == wallet.KindDebtSettlement {
			n -= t.Amount
		}
	}
	return n
}
