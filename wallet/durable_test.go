package wallet_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/durable/durabletest"
	"github.com/fibe-dev/billing/wallet"
)

// The autocommit forms commit through durable, like every acknowledging
// commit: on a pool whose commits wait for a synchronous standby that
// never confirms them (each wait cancelled, as pg_auto_failover's keeper
// does when it turns synchronous replication off), Post, Credit, Debit,
// Convert and a debit Adjust each answer durable.ErrNotDurable and no
// transaction, though the primary applied the post once. The same call
// again is a replay, which commits nothing to wait for: it answers the
// stored post, and the audit is clean.
func TestAutocommitFormsCommitThroughDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	stranded := durabletest.Strand(t, pool.Config().ConnString())
	cancelled := durabletest.CancelWaits(t, stranded)
	s := wallet.New(stranded, wallet.Options{})
	p := newPlayer(t, pool)
	fund(t, wallet.New(pool, wallet.Options{}), p, wallet.Mana, 100)
	post := func(d wallet.Direction, key string) wallet.PostParams {
		return wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 3, Direction: d,
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(key)}
	}
	forms := []struct {
		name, key string // key: what the form stores
		call      func() (replayed bool, err error)
	}{
		{"Post", "post", func() (bool, error) {
			r, err := s.Post(ctx, post(wallet.Credit, "post"))
			return r != nil && r.Replayed, err
		}},
		{"Credit", "credit", func() (bool, error) { r, err := s.Credit(ctx, post("", "credit")); return r != nil && r.Replayed, err }},
		{"Debit", "debit", func() (bool, error) { r, err := s.Debit(ctx, post("", "debit")); return r != nil && r.Replayed, err }},
		{"Convert", "convert" + wallet.ManaDebitSuffix, func() (bool, error) {
			c, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 2, IdempotencyKey: wallet.CallerKey("convert")})
			return c != nil && c.Replayed, err
		}},
		{"Adjust", wallet.OperatorKey(wallet.OperatorAdjust, "adjust").String(), func() (bool, error) {
			r, err := s.Adjust(ctx, wallet.AdjustParams{PlayerID: p, Currency: wallet.Mana, Amount: -4, Reason: "r", Key: "adjust"})
			return r != nil && r.Replayed, err
		}},
	}
	for _, f := range forms {
		replayed, err := f.call()
		require.ErrorIs(t, err, durable.ErrNotDurable, "%s: an unconfirmed commit is not acknowledged", f.name)
		require.False(t, replayed, f.name)
		require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = $1`, f.key),
			"%s: the primary applied it", f.name)
		replayed, err = f.call()
		require.NoError(t, err, "%s: a replay commits nothing to wait for", f.name)
		require.True(t, replayed, f.name)
	}
	require.GreaterOrEqual(t, cancelled.Load(), int64(len(forms)), "every form's commit waited for the standby")
	require.Equal(t, int64(100+3+3-3-2-4), balance(t, pool, p, wallet.Mana), "each form moved the wallet once")
}
