package provider

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Retry bounds the attempts at one API call.
type Retry struct {
	// Budget is the total time spent trying (default 8s): after it the
	// caller answers 503 rather than keep its client waiting.
	Budget time.Duration
	// AttemptTimeout bounds each attempt (default 5s).
	AttemptTimeout time.Duration
	// BaseDelay is the first backoff (default 200ms), doubled per attempt,
	// with jitter, capped by what is left of the budget.
	BaseDelay time.Duration
	// RetryAfter is what a DownError suggests when the provider said
	// nothing (default 5s).
	RetryAfter time.Duration
}

func (r Retry) withDefaults() Retry {
	if r.Budget <= 0 {
		r.Budget = 8 * time.Second
	}
	if r.AttemptTimeout <= 0 {
		r.AttemptTimeout = 5 * time.Second
	}
	if r.BaseDelay <= 0 {
		r.BaseDelay = 200 * time.Millisecond
	}
	if r.RetryAfter <= 0 {
		r.RetryAfter = 5 * time.Second
	}
	return r
}

// Op names an API call.
type Op string

// The API calls of a driver.
const (
	OpCheckout   Op = "checkout"
	OpListEvents Op = "list_events"
	OpRefund     Op = "refund"
)

// needs is the capability op needs.
func (op Op) needs() Capability {
	switch op {
	case OpCheckout:
		return Checkouts
	case OpListEvents:
		return Listing
	case OpRefund:
		return Refunds
	}
	return 0
}

// Outcomes of checkout attempts, the label values of
// billing_checkout_provider_calls_total.
const (
	outcomeOK       = "ok"
	outcomeRetry    = "retryable_error"
	outcomeRejected = "rejected"
	outcomeError    = "error"
)

var checkoutCalls = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "billing_checkout_provider_calls_total",
	Help: "Attempts to open a provider checkout, by provider and outcome (ok, retryable_error, rejected, error).",
}, []string{"provider", "outcome"})

// Policy is a driver's one way of calling its provider's API: every call,
// whatever it is, is attempted until it succeeds, fails for good, or the
// retry budget is spent, and every failure is classified by the driver's
// one classify function. A driver makes one Policy, in its New.
type Policy struct {
	support  Support
	retry    Retry
	classify func(error) error
}

// NewPolicy returns the policy of a driver that can do s. classify maps a
// failure of its API client to a Transient error (worth another attempt),
// a *RejectedError (the provider's refusal) or any other error (final); it
// is not called for errors already classified or for the driver's own
// verdicts (ErrPriceMismatch and the like).
func NewPolicy(s Support, r Retry, classify func(error) error) *Policy {
	return &Policy{support: s, retry: r.withDefaults(), classify: classify}
}

// Available implements Provider.Available for the policy's driver.
func (p *Policy) Available(c Capability) error { return p.support.Check(c) }

// Call is the one way a driver calls its API: op is refused at once when
// the driver cannot do it (Available), else f is run under p's Do and its
// result returned.
func Call[T any](ctx context.Context, p *Policy, op Op, f func(ctx context.Context) (T, error)) (T, error) {
	var out T
	if err := p.support.Check(op.needs()); err != nil {
		return out, err
	}
	err := p.Do(ctx, op, func(ctx context.Context) (err error) {
		out, err = f(ctx)
		return err
	})
	return out, err
}

// Do calls attempt until it succeeds, fails for good, or the budget is
// spent; then the error is a *DownError carrying the provider's
// Retry-After, or the policy's when it sent none.
func (p *Policy) Do(ctx context.Context, op Op, attempt func(ctx context.Context) error) error {
	deadline := time.Now().Add(p.retry.Budget)
	delay := p.retry.BaseDelay
	for {
		err := p.once(ctx, attempt)
		if op == OpCheckout {
			checkoutCalls.WithLabelValues(p.support.Provider, outcomeOf(err)).Inc()
		}
		after, transient := IsTransient(err)
		if err == nil || !transient {
			return err
		}
		wait := max(after, delay/2+rand.N(delay/2+1))
		if time.Now().Add(wait).After(deadline) || ctx.Err() != nil {
			return &DownError{Provider: p.support.Provider, RetryAfter: max(after, p.retry.RetryAfter), Err: err}
		}
		select {
		case <-ctx.Done():
			return &DownError{Provider: p.support.Provider, RetryAfter: p.retry.RetryAfter, Err: ctx.Err()}
		case <-time.After(wait):
		}
		delay *= 2
	}
}

// once is one attempt under the attempt timeout, its failure classified.
func (p *Policy) once(ctx context.Context, attempt func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.retry.AttemptTimeout)
	defer cancel()
	err := attempt(ctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return Transient(err, 0) // our attempt timeout, not the provider's verdict
	case decided(err):
		return err
	}
	return p.classify(err)
}

// decided reports whether err needs no classifying: already classified,
// or a driver's own verdict.
func decided(err error) bool {
	if _, ok := IsTransient(err); ok {
		return true
	}
	for _, v := range []error{ErrRejected, ErrPriceMismatch, ErrSKUNotConfigured, ErrNotRefundable, ErrNotConfigured, ErrUnsupported} {
		if errors.Is(err, v) {
			return true
		}
	}
	return false
}

func outcomeOf(err error) string {
	_, transient := IsTransient(err)
	switch {
	case err == nil:
		return outcomeOK
	case transient:
		return outcomeRetry
	case errors.Is(err, ErrRejected):
		return outcomeRejected
	}
	return outcomeError
}
