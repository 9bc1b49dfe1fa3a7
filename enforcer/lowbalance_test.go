package enforcer_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/wallet"
)

// TestLowBalanceOnceUnderRace: one player with 4 Marquees at 100 Sparks a
// day holds 2000 Sparks (5 days; the threshold is 3). 16 goroutines each
// debit 30 Sparks, then post the same key again (a retry), while two
// overlapping sweeps on two River clients fund the day (400). Neither side
// alone crosses (1520, 1600); together they leave 1120, 2 days: whatever
// order the wallet row's lock gives them, exactly one wallet.low_balance
// is written, and no wallet.balance_recovered. The env ends with the full
// audit, the events' invariant included.
func TestLowBalanceOnceUnderRace(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, utc)
	e := newEnv(t, 40, utc, now)
	e.wallet = wallet.New(e.pool, wallet.Options{Observer: events.LowBalance{Days: 3}})
	e.svc = enforcer.New(e.pool, e.wallet, enforcer.Options{TZ: utc, Now: e.clock.Now, Logger: quiet, BatchSize: 100,
		Complete: completeMode(t)})
	p := e.player(2000)
	for range 4 {
		e.marquee(p)
	}
	clients := []*river.Client[pgx.Tx]{e.client(clientOpts{id: "a", svc: e.svc}), e.client(clientOpts{id: "b", svc: e.svc})}

	const n, spend = 16, 30
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 2*n+len(clients))
	for i := range n {
		wg.Go(func() {
			<-start
			for range 2 {
				_, err := e.wallet.Debit(e.ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: spend,
					Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("spend-%d", i)),
					Account: wallet.AccountAdjustments})
				errs <- err
			}
		})
	}
	for _, c := range clients {
		wg.Go(func() {
			<-start
			_, err := e.svc.Sweep(e.ctx, c, enforcer.SweepOptions{})
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	e.waitIdle(20 * time.Second)
	require.Equal(t, int64(2000-4*100-n*spend), e.sparks(p))

	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM events WHERE player_id = $1 AND type = $2`, p, events.WalletLowBalance))
	require.Zero(t, e.count(`SELECT count(*) FROM events WHERE player_id = $1 AND type = $2`, p, events.WalletBalanceRecovered))
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM events WHERE id = $1`,
		events.ID(events.WalletLowBalance, events.LowBalanceKey(p, 1))), "the event is the first crossing's")
	require.Equal(t, int64(1), e.count(`SELECT crossings FROM low_balance_state WHERE player_id = $1 AND low`, p))
	// The crossing's data is the balance the crossing post left: below 3
	// days (1200), at least what everything leaves.
	at := e.count(`SELECT (payload->'data'->>'sparks_balance')::bigint FROM events WHERE player_id = $1 AND type = $2`,
		p, events.WalletLowBalance)
	require.Less(t, at, int64(1200))
	require.GreaterOrEqual(t, at, int64(2000-4*100-n*spend))

	// A third sweep of the day finds it paid, and the wallet's replays move
	// nothing: no second event.
	_, err := e.svc.Sweep(e.ctx, clients[0], enforcer.SweepOptions{})
	require.NoError(t, err)
	e.waitIdle(20 * time.Second)
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM events WHERE player_id = $1 AND type IN ($2, $3)`,
		p, events.WalletLowBalance, events.WalletBalanceRecovered))
}
