package enforcer_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/wallet"
)

// N concurrent fundings of one Marquee-day write one marquee.funded under
// the id derived from the day's funding key; a day its owner cannot pay
// writes one marquee.unfunded, however often it is tried; the audit,
// events included, is clean.
func TestFundingEmitsItsEvents(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 9, 30, 0, 0, utc)
	e := newEnv(t, 30, utc, now)
	p := e.player(150)
	m := e.marquee(p)
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	funded := events.ID(events.MarqueeFunded, wallet.FundingKey(m.ID, "2024-03-10").String())
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM events WHERE type = 'marquee.funded'`))
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM events WHERE id = $1
		AND payload->'data'->>'plan' = 'standard' AND (payload->'data'->>'sparks_debited')::int = 100`, funded))

	// The next day finds 50 Sparks: unfunded, once.
	e.clock.Set(time.Date(2024, 3, 11, 0, 5, 0, 0, utc))
	for range 3 {
		res, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-11"})
		require.NoError(t, err)
		require.Equal(t, enforcer.OutcomeInsufficient, res.Outcome)
	}
	unfunded := events.ID(events.MarqueeUnfunded, enforcer.UnfundedKey(m.ID, "2024-03-11"))
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM events WHERE type = 'marquee.unfunded'`))
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM events WHERE id = $1
		AND payload->'data'->>'reason' = 'insufficient_sparks'`, unfunded))
	require.Equal(t, int64(2), e.count(`SELECT max(sequence) FROM events WHERE player_id = $1`, p))
	e.requireClean()

	// Planted, in a transaction rolled back after (the env's cleanup
	// audits the database): the funding's event gone is reported by its
	// check, and only by it.
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(e.ctx)) }()
	_, err = tx.Exec(e.ctx, `DELETE FROM events WHERE id = $1`, funded)
	require.NoError(t, err)
	vs, err := events.Audit(e.ctx, tx)
	require.NoError(t, err)
	require.Len(t, vs, 1, "%v", vs)
	require.Equal(t, "funding_without_event", vs[0].Check)
	require.Contains(t, vs[0].Detail, wallet.FundingKey(m.ID, "2024-03-10").String())
}
