package provider

import (
	"context"
	"errors"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// billing_checkout_provider_calls_total counts every attempt at opening a
// checkout by outcome, and nothing else the policy runs.
func TestCheckoutAttemptsCounted(t *testing.T) {
	t.Parallel()
	p := NewPolicy(Support{Provider: "metrics_test"}, Retry{Budget: time.Second, BaseDelay: time.Millisecond}, func(err error) error { return err })
	n := 0
	attempt := func(context.Context) error {
		n++
		switch n {
		case 1, 2:
			return Transient(errors.New("503"), 0)
		case 3:
			return nil
		}
		return &RejectedError{Provider: "metrics_test", Status: 400}
	}
	require.NoError(t, p.Do(context.Background(), OpCheckout, attempt))
	require.ErrorIs(t, p.Do(context.Background(), OpCheckout, attempt), ErrRejected)
	require.ErrorIs(t, p.Do(context.Background(), OpCheckout, func(context.Context) error { return ErrPriceMismatch }), ErrPriceMismatch)
	require.NoError(t, p.Do(context.Background(), OpListEvents, func(context.Context) error { return nil }))
	for outcome, want := range map[string]float64{outcomeRetry: 2, outcomeOK: 1, outcomeRejected: 1, outcomeError: 1} {
		var m dto.Metric
		require.NoError(t, checkoutCalls.WithLabelValues("metrics_test", outcome).Write(&m))
		require.Equal(t, want, m.GetCounter().GetValue(), outcome)
	}
}
