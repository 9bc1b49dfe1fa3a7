package enforcer_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

func TestCreateGetListMarquees(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 12, 0, 0, 0, utc)
	e := newEnv(t, 4, utc, now)
	alice, bob := e.player(0), e.player(0)
	plans := map[string]enforcer.Plan{"standard": {DailySparks: 100}, "big": {DailySparks: 250}}

	m, err := enforcer.CreateMarquee(e.ctx, e.pool, plans, enforcer.CreateParams{PlayerID: alice, Name: "  web-1 ", Plan: "big"})
	require.NoError(t, err)
	require.Equal(t, "web-1", m.Name)
	require.Equal(t, int64(250), m.DailyPrice, "price copied from the plan")
	require.Equal(t, enforcer.StateRunning, m.DesiredState)
	require.Equal(t, enforcer.StatusUnfunded, m.Status)
	require.Nil(t, m.PaidThrough)
	require.False(t, enforcer.Funded(m, now))

	_, err = enforcer.CreateMarquee(e.ctx, e.pool, plans, enforcer.CreateParams{PlayerID: alice, Name: "x", Plan: "gold"})
	require.ErrorIs(t, err, enforcer.ErrUnknownPlan)
	for _, name := range []string{"", "   ", strings.Repeat("a", 101), "a\x00b", "tab\there", "\xff"} {
		_, err = enforcer.CreateMarquee(e.ctx, e.pool, plans, enforcer.CreateParams{PlayerID: alice, Name: name, Plan: "big"})
		require.ErrorIs(t, err, enforcer.ErrInvalidName, "%q", name)
	}
	_, err = enforcer.CreateMarquee(e.ctx, e.pool, plans, enforcer.CreateParams{PlayerID: 1 << 40, Name: "x", Plan: "big"})
	require.ErrorIs(t, err, enforcer.ErrUnknownPlayer)
	m2, err := enforcer.CreateMarquee(e.ctx, e.pool, plans, enforcer.CreateParams{PlayerID: alice, Name: strings.Repeat("é", 100), Plan: "standard"})
	require.NoError(t, err)

	got, err := enforcer.GetMarquee(e.ctx, e.pool, alice, m.ID)
	require.NoError(t, err)
	require.Equal(t, m.ID, got.ID)
	_, err = enforcer.GetMarquee(e.ctx, e.pool, bob, m.ID)
	require.ErrorIs(t, err, enforcer.ErrNotFound, "another player's Marquee is not found")
	_, err = enforcer.GetMarquee(e.ctx, e.pool, alice, m.ID+1000)
	require.ErrorIs(t, err, enforcer.ErrNotFound)

	list, err := enforcer.ListMarquees(e.ctx, e.pool, alice)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []int64{m.ID, m2.ID}, []int64{list[0].ID, list[1].ID})
	list, err = enforcer.ListMarquees(e.ctx, e.pool, bob)
	require.NoError(t, err)
	require.Empty(t, list)

	// Inside a transaction too (the DB interface takes a pgx.Tx).
	tx := testdb.Begin(t, e.pool)
	_, err = enforcer.CreateMarquee(e.ctx, tx, plans, enforcer.CreateParams{PlayerID: bob, Name: "rolled back", Plan: "big"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(e.ctx))
	list, err = enforcer.ListMarquees(e.ctx, e.pool, bob)
	require.NoError(t, err)
	require.Empty(t, list)
}

func TestMarqueeViewAndGate(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 23, 59, 0, 0, utc)
	e := newEnv(t, 4, utc, now)
	p := e.player(1000)
	m := e.marquee(p)

	v := m.View(now)
	require.Equal(t, [3]any{false, (*time.Time)(nil), enforcer.StatusUnfunded}, [3]any{v.Funded, v.PaidThrough, v.Status})
	require.Equal(t, [3]any{"m", "standard", int64(100)}, [3]any{v.Name, v.Plan, v.DailyPrice})
	_, err := enforcer.RequireFunded(e.ctx, e.pool, p, m.ID, now)
	require.ErrorIs(t, err, enforcer.ErrNotFunded)
	_, err = enforcer.RequireFunded(e.ctx, e.pool, e.player(0), m.ID, now)
	require.ErrorIs(t, err, enforcer.ErrNotFound)

	res, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
	require.NoError(t, err)
	require.Equal(t, enforcer.OutcomeFunded, res.Outcome)
	m = e.get(m)
	v = m.View(now)
	require.True(t, v.Funded)
	require.Equal(t, enforcer.StatusFunded, v.Status)
	require.Equal(t, "2024-03-11T00:00:00Z", v.PaidThrough.UTC().Format(time.RFC3339))
	_, err = enforcer.RequireFunded(e.ctx, e.pool, p, m.ID, now)
	require.NoError(t, err)

	// The gate is paid_through > now: at midnight the paid day is over.
	midnight := time.Date(2024, 3, 11, 0, 0, 0, 0, utc)
	require.True(t, enforcer.Funded(m, midnight.Add(-time.Nanosecond)))
	require.False(t, enforcer.Funded(m, midnight))
	v = m.View(midnight)
	require.False(t, v.Funded)
	require.Equal(t, enforcer.StatusUnfunded, v.Status, "status agrees with the gate")
	_, err = enforcer.RequireFunded(e.ctx, e.pool, p, m.ID, midnight)
	require.ErrorIs(t, err, enforcer.ErrNotFunded)

	// billing_marquees_unfunded, computed at scrape with the clock.
	e.marquee(p)
	reg := prometheus.NewRegistry()
	reg.MustRegister(enforcer.NewUnfundedCollector(e.pool, e.clock.Now))
	gauge := func() float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		require.Len(t, families, 1)
		require.Equal(t, "billing_marquees_unfunded", families[0].GetName())
		return families[0].GetMetric()[0].GetGauge().GetValue()
	}
	require.Equal(t, 1.0, gauge())
	e.clock.Set(midnight)
	require.Equal(t, 2.0, gauge())
}

func TestPaidThroughNeverMovesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, utc, time.Date(2024, 3, 10, 12, 0, 0, 0, utc))
	m := e.marquee(e.player(1000))
	_, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE marquees SET paid_through = paid_through - interval '1 second' WHERE id = $1`, m.ID)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code)
	_, err = e.pool.Exec(e.ctx, `UPDATE marquees SET paid_through = NULL WHERE id = $1`, m.ID)
	require.ErrorAs(t, err, &pgErr)

	// Funding an earlier day afterwards does not move it back either.
	res, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-09"})
	require.NoError(t, err)
	require.Equal(t, enforcer.OutcomeAlreadyPaid, res.Outcome)
	require.Equal(t, "2024-03-11T00:00:00Z", e.get(m).PaidThrough.UTC().Format(time.RFC3339))
	require.Equal(t, int64(1), e.debits(m.ID))
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A Marquee paid through exactly the end of the day is already paid for
// that day: the fast path decides so without a wallet post. The price
// changed since (a new plan), so a post under the day's key would be
// refused as a reused key, not answered as a replay: this test does not
// lean on the wallet key to stop a second debit.
func TestPaidThroughAtDayEndIsAlreadyPaid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, utc, time.Date(2024, 3, 10, 12, 0, 0, 0, utc))
	m := e.marquee(e.player(1000))
	res, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
	require.NoError(t, err)
	require.Equal(t, enforcer.OutcomeFunded, res.Outcome)
	require.Equal(t, "2024-03-11T00:00:00Z", e.get(m).PaidThrough.UTC().Format(time.RFC3339), "exactly the day's end")
	_, err = e.pool.Exec(e.ctx, `UPDATE marquees SET daily_price = daily_price + 50 WHERE id = $1`, m.ID)
	require.NoError(t, err)

	res, err = e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
	require.NoError(t, err)
	require.Equal(t, enforcer.OutcomeAlreadyPaid, res.Outcome, "%+v", res)
	require.Empty(t, res.Error)
	require.Equal(t, int64(1), e.debits(m.ID))
	// The audit compares each debit with today's price: put it back.
	_, err = e.pool.Exec(e.ctx, `UPDATE marquees SET daily_price = daily_price - 50 WHERE id = $1`, m.ID)
	require.NoError(t, err)
}
