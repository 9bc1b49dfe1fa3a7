package wallet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// postCounts reads billing_wallet_posts_total by "kind/outcome".
func postCounts(t *testing.T) map[string]float64 {
	t.Helper()
	return counters(t, "billing_wallet_posts_total", "kind", "outcome")
}

// counters reads the counter family name from the default registry, keyed
// by the values of labels joined with "/".
func counters(t *testing.T, name string, labels ...string) map[string]float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			key := make([]string, len(labels))
			for i, l := range labels {
				key[i] = have[l]
			}
			out[strings.Join(key, "/")] = m.GetCounter().GetValue()
		}
	}
	return out
}

// Not parallel: it runs alone, so the counters move only by its posts.
func TestPostMetrics(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	before := postCounts(t)
	post := wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 3, Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey("m")}
	_, err := s.Debit(ctx, post)
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance)
	fund(t, s, p, wallet.Sparks, 3)
	for range 2 {
		_, err = s.Debit(ctx, post)
		require.NoError(t, err)
	}
	post.Amount = 4
	_, err = s.Debit(ctx, post)
	require.ErrorIs(t, err, wallet.ErrIdempotencyKeyReused)
	after := postCounts(t)
	for key, want := range map[string]float64{
		"funding/insufficient": 1, "funding/created": 1, "funding/replayed": 1, "funding/key_reused": 1, "adjustment/created": 1,
	} {
		require.Equal(t, want, after[key]-before[key], key)
	}
}
