package timeline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

func orderTimeline(ctx context.Context, q dbtx.DB, id int64) (*Timeline, error) {
	h, err := loadHistory(ctx, q, []int64{id}, nil)
	if err != nil {
		return nil, err
	}
	if len(h.orders) == 0 {
		return nil, fmt.Errorf("%w: no order %d", ErrNotFound, id)
	}
	v := h.orderVerdict(h.orders[0])
	h.debtVerdict(&v)
	return h.timeline(Subject{Kind: SubjectOrder, ID: strconv.FormatInt(id, 10)}, v), nil
}

// timeline puts h's lines under verdict v.
func (h *history) timeline(s Subject, v verdict) *Timeline {
	t := &Timeline{Subject: s, Headline: v.headline, Verdict: v.text(), Attention: v.attention, PlayerID: h.playerID(),
		Orders: []int64{}, Lines: h.lines(), AsOf: time.Now().UTC()}
	for _, o := range h.orders {
		t.Orders = append(t.Orders, o.ID)
	}
	return t
}

// found is what a provider id resolves to: an order, or the ids a refund
// or dispute names a payment not recorded yet by.
type found struct {
	orderID int64
	refs    []ref
}

// resolveSQL looks the id up everywhere a provider id is kept, each by an
// index: a payment's aliases, an unapplied payment's refund, a fact, a
// refund or dispute event (by its reversal id or event id), a payment
// event, an order's checkout, an event naming a payment not known yet, a
// reversal job not worked yet, a claimed event refused as it was read (by
// the payment it names). Column 1 is the preference.
const resolveSQL = `SELECT 1, p.order_id, '', '' FROM payment_aliases a JOIN payments p ON p.id = a.payment
	WHERE a.provider = $1 AND a.alias = $2
UNION ALL SELECT 2, order_id, '', '' FROM payments WHERE provider = $1 AND refund_id = $2
UNION ALL SELECT 3, p.order_id, '', '' FROM payment_reversals f JOIN payments p ON p.id = f.payment
	WHERE f.provider = $1 AND f.reversal_id = $2
UNION ALL SELECT 4, p.order_id, e.payment_ref, coalesce(e.other_ref, '') FROM reversal_events e
	LEFT JOIN payments p ON p.id = e.payment WHERE e.provider = $1 AND (e.reversal_id = $2 OR e.event_id = $2)
UNION ALL SELECT 5, order_id, '', '' FROM webhook_events WHERE provider = $1 AND event_id = $2 AND order_id IS NOT NULL
UNION ALL SELECT 6, id, '', '' FROM orders WHERE provider = $1 AND checkout_id = $2
UNION ALL SELECT 7, NULL, payment_ref, coalesce(other_ref, '') FROM reversal_events
	WHERE provider = $1 AND (payment_ref = $2 OR other_ref = $2)
UNION ALL SELECT 8, NULL, args ->> 'payment_id', '' FROM river_job
	WHERE args ->> 'event_id' = $2 AND args ->> 'provider' = $1 AND kind IN ('fulfill_order', 'reverse_payment')
		AND kind = 'reverse_payment'
UNION ALL SELECT 9, p.order_id, w.payment_ref, '' FROM webhook_events w
	LEFT JOIN payment_aliases a ON a.provider = w.provider AND a.alias = w.payment_ref
	LEFT JOIN payments p ON p.id = a.payment
	WHERE w.provider = $1 AND w.event_id = $2 AND w.payment_ref IS NOT NULL
ORDER BY 1`

func resolve(ctx context.Context, q dbtx.DB, provider, id string) (*found, error) {
	type hit struct {
		order      *int64
		ref, other string
	}
	hits, err := collect(ctx, q, "provider id", resolveSQL, []any{provider, id}, func(r pgx.Row) (hit, error) {
		var h hit
		var rank int
		return h, r.Scan(&rank, &h.order, &h.ref, &h.other)
	})
	if err != nil {
		return nil, err
	}
	f := &found{}
	for _, h := range hits {
		if h.order != nil && f.orderID == 0 {
			f.orderID = *h.order
		}
		for _, r := range []string{h.ref, h.other} {
			if r != "" {
				f.refs = append(f.refs, ref{provider, r})
			}
		}
	}
	if f.orderID == 0 && len(f.refs) == 0 {
		return nil, fmt.Errorf("%w: no %s payment, refund, dispute, event or checkout is known as %q", ErrNotFound, provider, id)
	}
	return f, nil
}

func paymentTimeline(ctx context.Context, q dbtx.DB, provider, id string) (*Timeline, error) {
	provider, id = strings.ToLower(strings.TrimSpace(provider)), strings.TrimSpace(id)
	f, err := resolve(ctx, q, provider, id)
	if err != nil {
		return nil, err
	}
	var orders []int64
	if f.orderID != 0 {
		orders = []int64{f.orderID}
	}
	h, err := loadHistory(ctx, q, orders, append(f.refs, ref{provider, id}))
	if err != nil {
		return nil, err
	}
	h.searched = id
	var v verdict
	if len(h.orders) == 0 {
		v = h.waitingVerdict(provider, f.refs)
	} else {
		v = h.orderVerdict(h.orders[0])
		h.debtVerdict(&v)
	}
	return h.timeline(Subject{Kind: SubjectPayment, Provider: provider, ID: id}, v), nil
}

// waitingVerdict: the id names only refund or dispute events (or their
// jobs) whose payment is not recorded.
func (h *history) waitingVerdict(provider string, refs []ref) verdict {
	v := verdict{headline: "Waiting for its payment", attention: true}
	var names []string
	for _, r := range refs {
		names = append(names, r.id)
	}
	what := plural(len(h.events), "refund or dispute event") + " names"
	if len(h.events) == 0 {
		what = "a reversal job not worked yet names"
	}
	if len(names) == 0 {
		names = []string{h.searched}
	}
	ids := uniq(names)
	also := ""
	if len(ids) > 1 {
		also = " (also known as " + strings.Join(ids[1:], ", ") + ")"
	}
	v.add(fmt.Sprintf("Waiting for its payment: %s %s payment %s%s, which is not recorded yet; it is decided when the payment is.",
		what, provider, ids[0], also))
	for _, e := range h.events {
		if e.Status == "refused" {
			v.add(fmt.Sprintf("Event %s was refused: %s.", e.EventID, e.Reason))
		}
	}
	return v
}

func uniq(ss []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
