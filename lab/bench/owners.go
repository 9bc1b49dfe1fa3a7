package bench

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/wallet"
)

// ownersFlag declares --owners: how many players the measured Marquees
// belong to. A player who owns many Marquees funds them all from one
// Sparks wallet, so at the day boundary their fund_day jobs contend for
// one row.
func ownersFlag(fs *pflag.FlagSet) {
	fs.Int("owners", 0, "players the measured Marquees are spread over (1: all belong to one player; 0: one player each); "+
		"below --marquees, the same number of one-per-player Marquees run beside them as the baseline funding_spread")
}

// ownersOf reads --owners for n Marquees: 0 means one owner per Marquee.
func ownersOf(fs *pflag.FlagSet, n int) (int, error) {
	owners, _ := fs.GetInt("owners")
	switch {
	case owners == 0:
		return n, nil
	case owners < 0 || owners > n:
		return 0, fmt.Errorf("bench funding: --owners must be 1 to --marquees (%d), or 0", n)
	}
	return owners, nil
}

// ownedSparks is what each owner is credited: enough for every round of its
// Marquees plus the wallet-debit and direct-funding baselines.
func ownedSparks(n, owners int) int64 {
	perOwner := int64((n + owners - 1) / owners)
	return perOwner * fundingPrice * 1000
}

// seedOwners creates owners players and n Marquees dealt round-robin over
// them, and funds each owner's Sparks wallet through the Store.
func seedOwners(ctx context.Context, env Env, w *wallet.Store, n, owners int, run int64) ([]int64, error) {
	var players []int64
	for range owners {
		var id int64
		if err := env.Pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('bench-owner') RETURNING id`).Scan(&id); err != nil {
			return nil, fmt.Errorf("bench funding: owners: %w", err)
		}
		_, err := w.Credit(ctx, wallet.PostParams{PlayerID: id, Currency: wallet.Sparks, Amount: ownedSparks(n, owners),
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("bench:%d:owner:%d", run, id))})
		if err != nil {
			return nil, fmt.Errorf("bench funding: fund owner: %w", err)
		}
		players = append(players, id)
	}
	return addMarquees(ctx, env.Pool, dealt(players, n))
}

// dealt lists n owners, players taken round-robin: Marquee i belongs to
// players[i % len(players)].
func dealt(players []int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = players[i%len(players)]
	}
	return out
}
