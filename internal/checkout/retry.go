package checkout

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Retry bounds the attempts at one provider call.
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

func (p Retry) withDefaults() Retry {
	if p.Budget <= 0 {
		p.Budget = 8 * time.Second
	}
	if p.AttemptTimeout <= 0 {
		p.AttemptTimeout = 5 * time.Second
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 200 * time.Millisecond
	}
	if p.RetryAfter <= 0 {
		p.RetryAfter = 5 * time.Second
	}
	return p
}

// open calls o until it succeeds, fails for good, or the budget is spent.
func (p Retry) open(ctx context.Context, provider string, o Opener, r Request) (*Session, error) {
	deadline := time.Now().Add(p.Budget)
	delay := p.BaseDelay
	for {
		s, err := p.attempt(ctx, o, r)
		providerCalls.WithLabelValues(provider, outcomeOf(err)).Inc()
		var re *retryableError
		if err == nil || !errors.As(err, &re) {
			return s, err
		}
		wait := max(re.retryAfter, delay/2+rand.N(delay/2+1))
		if time.Now().Add(wait).After(deadline) || ctx.Err() != nil {
			return nil, &DownError{Provider: provider, RetryAfter: max(re.retryAfter, p.RetryAfter), Err: err}
		}
		select {
		case <-ctx.Done():
			return nil, &DownError{Provider: provider, RetryAfter: p.RetryAfter, Err: ctx.Err()}
		case <-time.After(wait):
		}
		delay *= 2
	}
}

func (p Retry) attempt(ctx context.Context, o Opener, r Request) (*Session, error) {
	ctx, cancel := context.WithTimeout(ctx, p.AttemptTimeout)
	defer cancel()
	s, err := o.Open(ctx, r)
	if err != nil && ctx.Err() != nil {
		return nil, retryable(err, 0) // our attempt timeout, not the provider's verdict
	}
	return s, err
}
