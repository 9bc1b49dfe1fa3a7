package wallet

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	postsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_wallet_posts_total",
		Help: "Wallet posts by kind and outcome (created, replayed, insufficient, outstanding_debt, key_reused, reserved_key, error). A conversion counts once.",
	}, []string{"kind", "outcome"})
	postDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "billing_wallet_post_duration_seconds",
		Help:    "Time spent in a wallet post or conversion, whatever its outcome.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	debitSetsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_wallet_debit_sets_total",
		Help: "Batches of debits (fund_day group commits) applied by one set-based statement (outcome applied) or redone post by post because the statement failed (outcome fallback: a concurrent winner of a key).",
	}, []string{"outcome"})
)

// observe records one post. Kinds outside the known set are folded into
// "other" so a caller's free-text kind cannot blow up label cardinality.
func observe(kind Kind, start time.Time, replayed bool, err error) {
	postDuration.Observe(time.Since(start).Seconds())
	k := string(kind)
	if _, ok := defaultAccounts[kind]; !ok {
		k = "other"
	}
	postsTotal.WithLabelValues(k, outcome(replayed, err)).Inc()
}

func outcome(replayed bool, err error) string {
	switch {
	case err == nil && replayed:
		return "replayed"
	case err == nil:
		return "created"
	case errors.Is(err, ErrInsufficientBalance):
		return "insufficient"
	case errors.Is(err, ErrOutstandingDebt):
		return "outstanding_debt"
	case errors.Is(err, ErrIdempotencyKeyReused):
		return "key_reused"
	case errors.Is(err, ErrReservedKey):
		return "reserved_key"
	default:
		return "error"
	}
}
