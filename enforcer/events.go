package enforcer

import (
	"cmp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/wallet"
)

// UnfundedKey is the key of marquee.unfunded: the day's funding key, so a
// Marquee-day is reported unfunded at most once, however often its job
// runs.
func UnfundedKey(marqueeID int64, day string) string {
	return wallet.FundingKey(marqueeID, day).String() + ":unfunded"
}

// emitFunding queues on b, to be sent in the batch's transaction,
// marquee.funded for each Marquee debited now (keyed on its day's funding
// key) and marquee.unfunded for each whose day began without the Sparks to
// pay for it and that no earlier day still covers. The batch's posts
// locked every owner's wallet already; events go in player order all the
// same.
func emitFunding(b *pgx.Batch, plans []*planned, now time.Time) (*events.Queued, error) {
	var evs []events.Event
	for _, p := range plans {
		if ev, ok := fundingEvent(p, now); ok {
			evs = append(evs, ev)
		}
	}
	slices.SortStableFunc(evs, func(a, b events.Event) int { return cmp.Compare(a.PlayerID, b.PlayerID) })
	return events.QueueMany(b, evs)
}

func fundingEvent(p *planned, now time.Time) (events.Event, bool) {
	m, r := p.marquee, p.res
	if !p.complete || m == nil {
		return events.Event{}, false
	}
	switch {
	case r.Outcome == OutcomeFunded:
		through := ""
		if r.PaidThrough != nil {
			through = r.PaidThrough.UTC().Format(time.RFC3339)
		}
		return events.Event{Type: events.MarqueeFunded, Key: wallet.FundingKey(r.MarqueeID, r.Day).String(),
			PlayerID: m.playerID, Data: events.MarqueeFundedData{MarqueeID: r.MarqueeID, Day: r.Day, Plan: m.plan,
				SparksDebited: m.price, PaidThrough: through}}, true
	case r.Outcome == OutcomeInsufficient && (m.paidThrough == nil || !m.paidThrough.After(now)):
		return events.Event{Type: events.MarqueeUnfunded, Key: UnfundedKey(r.MarqueeID, r.Day), PlayerID: m.playerID,
			Data: events.MarqueeUnfundedData{MarqueeID: r.MarqueeID, Day: r.Day, Plan: m.plan,
				Reason: "insufficient_sparks"}}, true
	}
	return events.Event{}, false
}
