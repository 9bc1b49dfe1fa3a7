package enforcer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
)

// TestFundAheadPaysTomorrowBeforeMidnight: with funding ahead on, the
// sweeps in the last 15 minutes of a day pay the next day for Marquees
// whose day is paid, so they stay funded across midnight; an owner without
// the Sparks is told (last error) but keeps the day already paid; nothing
// is paid twice, and after midnight the ordinary sweep has nothing to do.
func TestFundAheadPaysTomorrowBeforeMidnight(t *testing.T) {
	t.Parallel()
	for _, tz := range []*time.Location{utc, newYork} {
		t.Run(tz.String(), func(t *testing.T) {
			t.Parallel()
			// 2024-03-10 is New York's 23-hour day; the next day is 24 hours.
			e := newEnv(t, 20, tz, time.Date(2024, 3, 10, 23, 40, 0, 0, tz))
			svc := enforcer.New(e.pool, e.wallet, enforcer.Options{TZ: tz, Now: e.clock.Now, Logger: quiet,
				FundAhead: 15 * time.Minute})
			inserter := e.client(clientOpts{})
			e.client(clientOpts{id: "w", svc: svc})
			paid, broke, unpaid := e.marquee(e.player(1000)), e.marquee(e.player(100)), e.marquee(e.player(1000))
			for _, m := range []*enforcer.Marquee{paid, broke} {
				res, err := svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
				require.NoError(t, err)
				require.Equal(t, enforcer.OutcomeFunded, res.Outcome)
			}
			tick := func() []*enforcer.SweepResult {
				res, err := svc.SweepTick(e.ctx, inserter)
				require.NoError(t, err)
				e.waitIdle(15 * time.Second)
				return res
			}
			midnight := time.Date(2024, 3, 11, 0, 0, 0, 0, tz)
			tomorrowEnd := time.Date(2024, 3, 12, 0, 0, 0, 0, tz)

			res := tick() // 23:40: not within 15 minutes of midnight
			require.Len(t, res, 1)
			require.Equal(t, 1, res[0].Enqueued, "the unpaid Marquee's today")
			require.True(t, e.get(unpaid).PaidThrough.Equal(midnight))

			e.clock.Set(time.Date(2024, 3, 10, 23, 50, 0, 0, tz))
			res = tick()
			require.Len(t, res, 2)
			require.Equal(t, "2024-03-11", res[1].Day)
			require.Equal(t, 3, res[1].Enqueued, "every Marquee whose today is paid")
			require.True(t, e.get(paid).PaidThrough.Equal(tomorrowEnd))
			require.True(t, e.get(unpaid).PaidThrough.Equal(tomorrowEnd))
			got := e.get(broke)
			require.True(t, got.PaidThrough.Equal(midnight), "a refused prepayment keeps the paid day")
			require.Equal(t, enforcer.StatusFunded, got.Status)
			require.Contains(t, got.LastError, "insufficient")
			require.True(t, enforcer.Funded(got, e.clock.Now()))

			e.clock.Set(time.Date(2024, 3, 10, 23, 55, 0, 0, tz))
			res = tick()
			require.Equal(t, 1, res[1].Seen, "only the broke one is still due tomorrow")

			e.clock.Set(midnight.Add(time.Minute))
			for _, m := range []*enforcer.Marquee{paid, unpaid} {
				require.True(t, enforcer.Funded(e.get(m), e.clock.Now()), "funded across midnight")
			}
			require.False(t, enforcer.Funded(e.get(broke), e.clock.Now()))
			res = tick()
			require.Len(t, res, 1)
			require.Equal(t, 1, res[0].Seen, "after midnight only the broke one is due")
			require.Equal(t, enforcer.StatusUnfunded, e.get(broke).Status)
			require.Equal(t, int64(2), e.debits(paid.ID))
			require.Equal(t, int64(2), e.debits(unpaid.ID))
			require.Equal(t, int64(1), e.debits(broke.ID))
			require.Equal(t, int64(800), e.sparks(paid.PlayerID))
		})
	}
}
