package enforcer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/wallet"
)

// TestAuditFundingFindsViolations breaks invariant 4 behind the enforcer's
// back, three ways, and expects the audit to name each.
func TestAuditFundingFindsViolations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, newYork, time.Date(2024, 3, 10, 12, 0, 0, 0, newYork))
	e.broken = true
	p := e.player(1000)
	a, b, c := e.marquee(p), e.marquee(p), e.marquee(p)
	for _, m := range []*enforcer.Marquee{a, b, c} {
		res, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
		require.NoError(t, err)
		require.Equal(t, enforcer.OutcomeFunded, res.Outcome)
	}
	violations, err := enforcer.AuditFunding(e.ctx, e.pool, e.tz)
	require.NoError(t, err)
	require.Empty(t, violations)

	// A second debit for a's day under another key.
	_, err = e.wallet.Debit(e.ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 100,
		Kind: wallet.KindFunding, Reference: "marquee:" + itoa(a.ID) + ":2024-03-10", IdempotencyKey: wallet.CallerKey("rogue"),
		Account: wallet.AccountFundingRevenue})
	require.NoError(t, err)
	// b's next day debited at the wrong price.
	_, err = e.wallet.Debit(e.ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1,
		Kind: wallet.KindFunding, Reference: "marquee:" + itoa(b.ID) + ":2024-03-11",
		IdempotencyKey: wallet.FundingKey(b.ID, "2024-03-11"), Account: wallet.AccountFundingRevenue})
	require.NoError(t, err)
	// Funding debits whose reference names no Marquee id the audit can
	// parse: not matched to a Marquee, and no cast error either.
	// The first twice: two debits for one reference are reported, under
	// Marquee 0.
	for i, ref := range []string{"marquee:not-a-number:2024-03-10", "marquee:not-a-number:2024-03-10",
		"marquee:123456789012345678901234:2024-03-10", "marquee:"} {
		_, err = e.wallet.Debit(e.ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1,
			Kind: wallet.KindFunding, Reference: ref, IdempotencyKey: wallet.CallerKey("odd-ref-" + itoa(int64(i))),
			Account: wallet.AccountFundingRevenue})
		require.NoError(t, err)
	}
	// c paid through the next day without its debit.
	_, err = e.pool.Exec(e.ctx, `UPDATE marquees SET paid_through = paid_through + interval '1 day' WHERE id = $1`, c.ID)
	require.NoError(t, err)

	violations, err = enforcer.AuditFunding(e.ctx, e.pool, e.tz)
	require.NoError(t, err)
	got := map[string][]int64{}
	for _, v := range violations {
		got[v.Check] = append(got[v.Check], v.MarqueeID)
	}
	for _, ids := range got {
		slices.Sort(ids)
	}
	require.Equal(t, map[string][]int64{
		"one_debit_per_day":   {0, a.ID},    // two debits for one day (0: the unparsable reference)
		"debit_is_price":      {a.ID, b.ID}, // a's rogue key, b's wrong amount
		"paid_through_backed": {c.ID},
	}, got, "%v", violations)
}
