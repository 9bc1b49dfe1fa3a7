package fulfillment

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/fibe-dev/billing/internal/provider"
)

// The provider's truth: every refund, dispute or chargeback event is kept
// in reversal_events as the provider sent it, and decided once against its
// payment: accepted (it counts) or refused (with its reason: another
// currency than the payment's, or an id that belongs to something else).
// A refused event changes nothing. A fact in payment_reversals, one per
// provider reversal id, is the fold of its accepted events: the largest
// amount (Stripe's amount_refunded is cumulative and only grows; a dispute's
// amount is what the provider withdrew) and the furthest state (open < lost
// < won). The fold depends only on the set of accepted events, so any
// arrival order and any number of deliveries end in the same facts, and the
// clawback follows from the facts alone. An amount above what the payment
// paid is accepted and capped (the clawback takes everything the payment
// minted), and counted.

// Reversal event statuses (reversal_events.status).
const (
	EventPending  = "pending"  // its payment is not known yet
	EventAccepted = "accepted" // it counts towards its fact
	EventRefused  = "refused"  // it changes nothing; reason says why
)

var (
	abovePaid = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_reversals_above_paid_total",
		Help: "Refund or dispute events accepted for more than their payment paid (clawed back in full, capped), by provider and kind.",
	}, []string{"provider", "kind"})
	decisions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_reversal_events_total",
		Help: "Refund or dispute events decided against their payment, by provider and decision (accepted, refused).",
	}, []string{"provider", "decision"})
)

func init() {
	for _, p := range provider.Names() {
		abovePaid.WithLabelValues(p, ReversalRefund)
		abovePaid.WithLabelValues(p, ReversalDispute)
		decisions.WithLabelValues(p, EventAccepted)
		decisions.WithLabelValues(p, EventRefused)
	}
}

// reversalEvent is one row of reversal_events.
type reversalEvent struct {
	id                               int64
	eventID, reversalID, kind, state string
	currency, status, reason         string
	amount                           int64
	payment, factPayment             int64 // 0: none
	decidedNow                       bool
}

// recordEvent stores the event of a once (a retried job finds its row):
// pending, or refused with refused as its reason.
func recordEvent(ctx context.Context, tx pgx.Tx, a ReversePaymentArgs, refused string) error {
	_, err := tx.Exec(ctx, `INSERT INTO reversal_events (provider, event_id, reversal_id, payment_ref, other_ref,
			kind, state, amount, currency, status, reason, decided_at)
		VALUES ($1, $2, $3, $4, nullif($5, ''), $6, $7, $8, lower($9),
			CASE WHEN $10 = '' THEN 'pending' ELSE 'refused' END, nullif($10, ''),
			CASE WHEN $10 = '' THEN NULL ELSE now() END)
		ON CONFLICT (provider, event_id) DO NOTHING`,
		a.Provider, a.EventID, a.ReversalID, a.PaymentID, a.OtherRef, a.ReversalKind, a.State, a.Amount, a.Currency, refused)
	if err != nil {
		return fmt.Errorf("fulfillment: record %s %s event %q: %w", a.Provider, a.ReversalKind, a.EventID, err)
	}
	return nil
}

// eventsOfSQL reads the reversal events that name any alias of payment $2
// of provider $1. The aliases are read first, as arrays: an IN (subquery)
// on either side of the OR cannot use the two ref indexes, and would read
// every event of the provider on each call.
const eventsOfSQL = `SELECT e.id, e.event_id, e.reversal_id, e.kind, e.state, e.currency, e.status,
		coalesce(e.reason, ''), e.amount, coalesce(e.payment, 0),
		coalesce((SELECT f.payment FROM payment_reversals f WHERE f.provider = e.provider AND f.reversal_id = e.reversal_id), 0)
	FROM reversal_events e
	WHERE e.provider = $1 AND (e.payment_ref = ANY (ARRAY(SELECT alias FROM payment_aliases WHERE payment = $2))
		OR e.other_ref = ANY (ARRAY(SELECT alias FROM payment_aliases WHERE payment = $2)))
	ORDER BY e.id FOR UPDATE OF e`

// eventsOf returns, locked and oldest first, every reversal event that
// names any alias of p, with the payment that already holds its fact.
func eventsOf(ctx context.Context, tx pgx.Tx, p *Payment) ([]*reversalEvent, error) {
	rows, err := tx.Query(ctx, eventsOfSQL, p.Provider, p.ID)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: read reversal events of payment %d: %w", p.ID, err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*reversalEvent, error) {
		var e reversalEvent
		err := r.Scan(&e.id, &e.eventID, &e.reversalID, &e.kind, &e.state, &e.currency, &e.status, &e.reason,
			&e.amount, &e.payment, &e.factPayment)
		return &e, err
	})
	if err != nil {
		return nil, fmt.Errorf("fulfillment: read reversal events of payment %d: %w", p.ID, err)
	}
	return events, nil
}

// decideAll decides every pending event of p, oldest first, and marks the
// ones it decided.
func decideAll(p *Payment, events []*reversalEvent) {
	kinds := map[string]string{}
	for _, e := range events {
		if e.status == EventAccepted && e.payment == p.ID {
			kinds[e.reversalID] = e.kind
		}
	}
	for _, e := range events {
		if e.status != EventPending {
			continue
		}
		e.reason = refusal(p, e, kinds)
		e.status, e.payment, e.decidedNow = EventAccepted, p.ID, true
		if e.reason != "" {
			e.status = EventRefused
			continue
		}
		kinds[e.reversalID] = e.kind
	}
}

// refusal says why event e cannot count towards payment p, or "". More
// than p paid is not a reason: the provider did take it back.
func refusal(p *Payment, e *reversalEvent, kinds map[string]string) string {
	switch {
	case !strings.EqualFold(e.currency, p.Currency):
		return fmt.Sprintf("%s in %s, the payment was in %s", e.kind, e.currency, strings.ToLower(p.Currency))
	case e.factPayment != 0 && e.factPayment != p.ID:
		return fmt.Sprintf("%s %s belongs to payment %d", e.kind, e.reversalID, e.factPayment)
	case kinds[e.reversalID] != "" && kinds[e.reversalID] != e.kind:
		return fmt.Sprintf("%s is a %s; this event calls it a %s", e.reversalID, kinds[e.reversalID], e.kind)
	}
	return ""
}

// saveDecisions writes the decisions decideAll made.
func saveDecisions(ctx context.Context, tx pgx.Tx, events []*reversalEvent) error {
	var ids, payments []int64
	var statuses, reasons []string
	for _, e := range events {
		if e.decidedNow {
			ids, payments = append(ids, e.id), append(payments, e.payment)
			statuses, reasons = append(statuses, e.status), append(reasons, e.reason)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE reversal_events e SET status = d.status, reason = nullif(d.reason, ''),
			payment = d.payment, decided_at = now()
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS d(id, status, reason, payment)
		WHERE e.id = d.id`, ids, statuses, reasons, payments)
	if err != nil {
		return fmt.Errorf("fulfillment: record reversal decisions: %w", err)
	}
	return nil
}

// fact is one provider refund or dispute as its accepted events add up.
type fact struct {
	reversalID, kind, state string
	amount                  int64
}

// stateRank orders a dispute's states: a closed dispute never reopens, and
// lost gives way to won because a lost dispute can still be reversed in our
// favour (Paddle's chargeback_reverse), while nothing turns won into lost.
func stateRank(s string) int {
	return map[string]int{StateOpen: 1, StateLost: 2, StateWon: 3}[s]
}

// foldFacts folds p's accepted events into one fact per reversal id.
func foldFacts(p *Payment, events []*reversalEvent) []fact {
	byID := map[string]*fact{}
	for _, e := range events {
		if e.status != EventAccepted || e.payment != p.ID {
			continue
		}
		f := byID[e.reversalID]
		if f == nil {
			f = &fact{reversalID: e.reversalID, kind: e.kind, state: e.state, amount: e.amount}
			byID[e.reversalID] = f
		}
		f.amount = max(f.amount, e.amount)
		if stateRank(e.state) > stateRank(f.state) {
			f.state = e.state
		}
	}
	facts := make([]fact, 0, len(byID))
	for _, f := range byID {
		facts = append(facts, *f)
	}
	slices.SortFunc(facts, func(a, b fact) int { return cmp.Compare(a.reversalID, b.reversalID) })
	return facts
}

// saveFacts writes p's facts, each only when it changed.
func saveFacts(ctx context.Context, tx pgx.Tx, p *Payment, facts []fact) error {
	if len(facts) == 0 {
		return nil
	}
	ids, kinds, states, amounts := make([]string, len(facts)), make([]string, len(facts)), make([]string, len(facts)),
		make([]int64, len(facts))
	for i, f := range facts {
		ids[i], kinds[i], states[i], amounts[i] = f.reversalID, f.kind, f.state, f.amount
	}
	_, err := tx.Exec(ctx, `INSERT INTO payment_reversals AS r (provider, reversal_id, payment_id, payment, kind, state, amount, currency)
		SELECT $1, f.id, $2, $3, f.kind, f.state, f.amount, lower($4)
		FROM unnest($5::text[], $6::text[], $7::text[], $8::bigint[]) AS f(id, kind, state, amount)
		ON CONFLICT (provider, reversal_id) DO UPDATE SET state = EXCLUDED.state, amount = EXCLUDED.amount, updated_at = now()
		WHERE r.payment = EXCLUDED.payment AND (r.state, r.amount) IS DISTINCT FROM (EXCLUDED.state, EXCLUDED.amount)`,
		p.Provider, p.PaymentID, p.ID, p.Currency, ids, kinds, states, amounts)
	if err != nil {
		return fmt.Errorf("fulfillment: record reversals of payment %d: %w", p.ID, err)
	}
	return nil
}

// lostMoney is what a payment's facts took back from us, each sum at most
// what the payment paid.
type lostMoney struct {
	refunded, disputed int64
	openDispute        bool
}

// lostOf sums facts for a payment of paid. Each fact is capped at paid
// before it is added, and each sum stops at paid, so no sum can wrap: a
// provider amount is any int64, and two of them once added up to a
// negative loss that gave the Mana back.
func lostOf(facts []fact, paid int64) lostMoney {
	var l lostMoney
	for _, f := range facts {
		switch {
		case f.kind == ReversalRefund:
			l.refunded = addCapped(l.refunded, f.amount, paid)
		case f.state == StateOpen || f.state == StateLost:
			l.disputed = addCapped(l.disputed, f.amount, paid)
			l.openDispute = true
		}
	}
	return l
}

// addCapped is min(limit, sum + n) for 0 <= sum <= limit and n >= 0,
// computed without overflow.
func addCapped(sum, n, limit int64) int64 {
	n = max(0, min(n, limit))
	if n > limit-sum {
		return limit
	}
	return sum + n
}

// total is the money gone back, at most what was paid: a refund seen both
// as a refund and as a dispute, or reported above the payment, is not
// taken twice.
func (l lostMoney) total(paid int64) int64 { return addCapped(l.refunded, l.disputed, paid) }

// clawbackTarget is ceil(minted x lost / paid), capped at minted; 0 for a
// payment that minted nothing.
func clawbackTarget(p *Payment, l lostMoney) int64 {
	lost := l.total(p.Amount)
	if p.ManaMinted == 0 || lost <= 0 || p.Amount <= 0 {
		return 0
	}
	n := new(big.Int).Mul(big.NewInt(p.ManaMinted), big.NewInt(lost))
	n.Add(n, big.NewInt(p.Amount-1))
	n.Quo(n, big.NewInt(p.Amount))
	return min(p.ManaMinted, n.Int64())
}

// evaluation is what one evaluation of a payment's events decided, for the
// caller to report once its transaction committed.
type evaluation struct {
	payment *Payment
	events  []*reversalEvent
}

// decision returns the status and reason of eventID, if it is p's.
func (ev evaluation) decision(eventID string) (status, reason string) {
	for _, e := range ev.events {
		if e.eventID == eventID {
			return e.status, e.reason
		}
	}
	return EventPending, ""
}

// report counts and logs what was decided; call it after the commit.
func (ev evaluation) report(logf func(msg string, args ...any)) {
	for _, e := range ev.events {
		if !e.decidedNow {
			continue
		}
		decisions.WithLabelValues(ev.payment.Provider, e.status).Inc()
		if e.status == EventRefused {
			logf("reversal event refused", "provider", ev.payment.Provider, "event_id", e.eventID,
				"reversal_id", e.reversalID, "payment_id", ev.payment.PaymentID, "reason", e.reason)
		} else if e.amount > ev.payment.Amount {
			abovePaid.WithLabelValues(ev.payment.Provider, e.kind).Inc()
			logf("reversal above the amount paid: clawed back in full", "provider", ev.payment.Provider,
				"event_id", e.eventID, "reversal_id", e.reversalID, "payment_id", ev.payment.PaymentID,
				"amount", e.amount, "paid", ev.payment.Amount)
		}
	}
}
