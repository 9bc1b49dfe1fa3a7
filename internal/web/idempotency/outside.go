package idempotency

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fibe-dev/billing/internal/platform/durable"
)

// WrapOutsideTx is Wrap for a handler that must not run inside a
// transaction, because it calls a remote service (a payment provider)
// whose latency must never hold a database connection or row lock. The
// handler commits its own effects, idempotently: the middleware still
// answers replays, in-flight and reused keys exactly as Wrap does, and
// stores the handler's answer in a short transaction of its own afterwards.
// A 5xx or 429 answer releases the key, so the client's retry runs the
// handler again and must find (not repeat) what the first run committed.
func (m *Middleware) WrapOutsideTx(h func(w http.ResponseWriter, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serveWith(w, r, func(w http.ResponseWriter, r *http.Request, claim *Claim) { m.runOutside(w, r, h, claim) })
	})
}

func (m *Middleware) runOutside(w http.ResponseWriter, r *http.Request, h func(http.ResponseWriter, *http.Request), claim *Claim) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.opts.HandlerTimeout)
	defer cancel()
	if claim != nil {
		ctx = context.WithValue(ctx, keyCtx{}, claim.Key)
	}
	rec := &recorder{header: http.Header{}}
	h(rec, r.WithContext(ctx))
	resp := rec.response()
	switch {
	case claim == nil:
	case resp.Status >= 500 || resp.Status == http.StatusTooManyRequests:
		if err := m.store.Release(ctx, claim); err != nil {
			// The claim stays running; it is taken over once stale.
			m.opts.Logger.WarnContext(ctx, "idempotency: release failed", "key_id", claim.ID, "error", err)
		}
	default:
		if err := m.complete(ctx, claim, resp); err != nil {
			m.opts.WriteError(w, r, err)
			return
		}
	}
	writeResponse(w, resp, false)
}

// complete stores resp as the claim's answer in a transaction of its own.
func (m *Middleware) complete(ctx context.Context, claim *Claim, resp *Response) error {
	tx, err := m.opts.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("idempotency: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := m.store.Lock(ctx, tx, claim); err != nil {
		return err
	}
	if err := m.store.Complete(ctx, tx, claim, resp, m.opts.Now()); err != nil {
		return err
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return fmt.Errorf("idempotency: commit: %w", err)
	}
	return nil
}
