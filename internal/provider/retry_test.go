package provider_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
)

var errNetwork = errors.New("connection reset by peer")

// classifyAll is a driver's classify that counts its calls and takes every
// error it is shown for the network's fault.
func classifyAll(calls *atomic.Int32) func(error) error {
	return func(err error) error {
		calls.Add(1)
		return provider.Transient(err, 0)
	}
}

func fast() provider.Retry {
	return provider.Retry{Budget: time.Second, BaseDelay: 5 * time.Millisecond, AttemptTimeout: 200 * time.Millisecond}
}

// failing fails n times with err, then succeeds; it counts its attempts.
func failing(n int32, err error, attempts *atomic.Int32) func(context.Context) error {
	return func(context.Context) error {
		if attempts.Add(1) <= n {
			return err
		}
		return nil
	}
}

func TestPolicyRetriesWithinBudget(t *testing.T) {
	t.Parallel()
	var classified, attempts atomic.Int32
	p := provider.NewPolicy(provider.Support{Provider: "x"}, fast(), classifyAll(&classified))
	require.NoError(t, p.Do(context.Background(), provider.OpListEvents, failing(3, errNetwork, &attempts)))
	require.Equal(t, int32(4), attempts.Load(), "three failures, then the success")
	require.Equal(t, int32(3), classified.Load(), "each failure classified once")
}

func TestPolicyStopsAtTheBudget(t *testing.T) {
	t.Parallel()
	var classified, attempts atomic.Int32
	r := fast()
	r.RetryAfter = 7 * time.Second
	p := provider.NewPolicy(provider.Support{Provider: "x"}, r, classifyAll(&classified))
	start := time.Now()
	err := p.Do(context.Background(), provider.OpRefund, failing(1<<30, errNetwork, &attempts))
	// Bounded by the budget: without it the attempts never end. The slack
	// is for a loaded machine, not part of the claim.
	require.Less(t, time.Since(start), r.Budget+30*time.Second, "bounded by the budget")
	require.ErrorIs(t, err, provider.ErrDown)
	require.ErrorIs(t, err, errNetwork, "the last failure is kept")
	down, ok := errors.AsType[*provider.DownError](err)
	require.True(t, ok)
	require.Equal(t, "x", down.Provider)
	require.Equal(t, 7*time.Second, down.RetryAfter, "the policy's, when the provider said nothing")
	require.Greater(t, attempts.Load(), int32(3))
}

// A refusal, and a driver's own verdict, are final: one attempt, and its
// own verdict is not even shown to classify.
func TestPolicyFinalErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		err        error
		classified int32
	}{
		{"refused", &provider.RejectedError{Provider: "x", Status: 400, Message: "no"}, 0},
		{"price mismatch", provider.ErrPriceMismatch, 0},
		{"not refundable", provider.ErrNotRefundable, 0},
		{"unclassified", errors.New("x: unreadable answer"), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var classified, attempts atomic.Int32
			p := provider.NewPolicy(provider.Support{Provider: "x"}, fast(), func(err error) error { classified.Add(1); return err })
			err := p.Do(context.Background(), provider.OpCheckout, failing(1<<30, c.err, &attempts))
			require.ErrorIs(t, err, c.err)
			require.Equal(t, int32(1), attempts.Load())
			require.Equal(t, c.classified, classified.Load())
		})
	}
}

// The provider's Retry-After is honoured between attempts and suggested
// to the caller.
func TestPolicyHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int32
	p := provider.NewPolicy(provider.Support{Provider: "x"}, provider.Retry{Budget: 500 * time.Millisecond, BaseDelay: time.Millisecond, RetryAfter: time.Second}, nil)
	start := time.Now()
	err := p.Do(context.Background(), provider.OpCheckout, failing(1<<30, provider.Transient(errNetwork, 2*time.Second), &attempts))
	require.Less(t, time.Since(start), 2*time.Second, "the 2 s Retry-After, past the budget, is not waited")
	require.Equal(t, int32(1), attempts.Load())
	down, _ := errors.AsType[*provider.DownError](err)
	require.Equal(t, 2*time.Second, down.RetryAfter)
}

// An attempt that outlives its timeout is retried, whatever it returned.
func TestPolicyAttemptTimeout(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int32
	p := provider.NewPolicy(provider.Support{Provider: "x"}, fast(), func(err error) error { return err })
	err := p.Do(context.Background(), provider.OpListEvents, func(ctx context.Context) error {
		if attempts.Add(1) == 1 {
			<-ctx.Done()
			return errors.New("x: gave up")
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int32(2), attempts.Load())
}
