package checkout

import "context"

// OpenWithRetry exposes Retry.open to the tests.
func OpenWithRetry(ctx context.Context, p Retry, provider string, o Opener, r Request) (*Session, error) {
	return p.withDefaults().open(ctx, provider, o, r)
}

// Retryable reports whether err is worth another attempt.
func Retryable(err error) bool {
	_, ok := err.(*retryableError)
	return ok
}
