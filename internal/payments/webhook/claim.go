package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/payments/outcome"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/telemetry"
)

// Default sizes of the claim batcher (Options.ClaimBatch, ClaimConcurrency).
const (
	DefaultClaimBatch       = 64
	DefaultClaimConcurrency = 2
)

// claimReq is one verified delivery waiting for its claim.
type claimReq struct {
	ev   *Event
	body []byte
	at   time.Time // claimed_at, taken when the delivery arrived
	meta []byte    // the delivery's trace context, for its fulfilment job's metadata
	// redrive marks an operator's redrive, not a delivery: it counts no
	// duplicate delivery on the claim.
	redrive bool
}

// claimKey is what webhook_events is UNIQUE on.
type claimKey struct{ provider, eventID string }

func (r claimReq) key() claimKey { return claimKey{r.ev.Provider, r.ev.ID} }

// hooks are seams for this package's tests (set through export_test.go);
// all nil in production.
type hooks struct {
	// queued is called by each delivery once it has joined the queue of
	// the next batch (groupcommit's OnQueued).
	queued func()
	// batch is called with the event ids of each batch before it runs.
	batch func(eventIDs []string)
	// beforeCommit is called with each claim transaction just before its
	// COMMIT, after every job insert.
	beforeCommit func(ctx context.Context, tx pgx.Tx)
}

// onQueued is the batcher's OnQueued for the queued hook (nil without one).
func (h hooks) onQueued() func(int) {
	if h.queued == nil {
		return nil
	}
	return func(int) { h.queued() }
}

// claim claims ev, and enqueues its job (or re-enqueues an orphan's), in
// the next batch of concurrent claims. It reports whether this delivery won. The wait is
// bounded like a claim transaction, so a stuck database answers 503; the
// batch may still commit the claim then, and the provider's retry is
// answered as a duplicate.
func (h *handler) claim(ctx context.Context, ev *Event, body []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	ctx, span := telemetry.StartClaim(ctx, ev.Provider, ev.ID, ev.Type, orderID(ev))
	defer span.End()
	return h.claims.Do(ctx, claimReq{ev: ev, body: body, at: h.opts.Now(), meta: telemetry.JobMetadata(ctx)})
}

// claimBatch is the groupcommit function of the claims: every candidate of
// the batch is claimed, and the jobs enqueued, in one transaction
// (see commitBatch). When that fails, each delivery is retried alone with
// claimOne, so one poison delivery fails only itself; the batch-level
// error is therefore always nil. A commit no standby confirmed
// (durable.ErrNotDurable) fails every delivery of the batch instead.
func (h *handler) claimBatch(ctx context.Context, reqs []claimReq) ([]bool, []error, error) {
	if h.opts.hooks.batch != nil {
		h.opts.hooks.batch(eventIDs(reqs))
	}
	won, errs := make([]bool, len(reqs)), make([]error, len(reqs))
	cands := candidates(reqs)
	res, err := h.commitBatch(ctx, reqs, cands)
	if errors.Is(err, durable.ErrNotDurable) {
		// Not one delivery's fault: the primary has no standby confirming
		// commits now, and each retried alone would only wait the same way.
		for i := range errs {
			errs[i] = err
		}
		return won, errs, nil
	}
	if err != nil {
		h.opts.Logger.Warn("webhook: batch claim failed, retrying its deliveries one by one",
			"deliveries", len(reqs), "error", err)
		h.claimEach(ctx, reqs, won, errs)
		return won, errs, nil
	}
	for _, i := range cands {
		_, won[i] = res.won[reqs[i].key()]
	}
	return won, errs, nil
}

// candidates returns the index of the first delivery of each (provider,
// event id) in reqs; the others are duplicates of it and lose.
func candidates(reqs []claimReq) []int {
	seen := make(map[claimKey]struct{}, len(reqs))
	out := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if _, dup := seen[r.key()]; !dup {
			seen[r.key()] = struct{}{}
			out = append(out, i)
		}
	}
	return out
}

func eventIDs(reqs []claimReq) []string {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ev.ID
	}
	return ids
}

// claimEach runs every delivery of a failed batch alone, concurrently
// (each on its own connection, with its own timeout).
func (h *handler) claimEach(ctx context.Context, reqs []claimReq, won []bool, errs []error) {
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { won[i], errs[i] = h.claimOne(ctx, reqs[i]) })
	}
	wg.Wait()
}

// claimOne is the single-delivery path, the fallback of a failed batch
// and what reconciliation and redrive claim through: a batch of one, so
// that there is one claim statement and one transaction flow. It reports
// whether this delivery won.
func (h *handler) claimOne(ctx context.Context, r claimReq) (bool, error) {
	res, err := h.commitBatch(ctx, []claimReq{r}, []int{0})
	if err != nil {
		return false, err
	}
	_, won := res.won[r.key()]
	return won, nil
}

// orderID is the order a payment event names, 0 for other events.
func orderID(ev *Event) int64 {
	if ev.Payment == nil {
		return 0
	}
	return ev.Payment.OrderID
}

// claimOutcome is the outcome an event with no job is claimed with:
// refused (its object could not be applied), or ignored (a type we only
// acknowledge); nil for an event whose job decides it.
func claimOutcome(ev *Event) *outcome.Result {
	switch {
	case ev.Refused != "":
		r := outcome.RefusedFor(ev.Refused)
		return &r
	case jobArgs(ev) == nil:
		return &outcome.Result{Outcome: outcome.Ignored}
	}
	return nil
}

// paymentRef is the provider payment id a refund or dispute names, also
// when it was refused: the payment's timeline finds it by it.
func paymentRef(ev *Event) string {
	if ev.Reversal != nil {
		return ev.Reversal.PaymentID
	}
	return ev.PaymentRef
}

// storedEvent reads claim k's stored payload with its provider's driver;
// without a driver (a Claimer given none), the delivery's own event,
// which has the same id.
func (h *handler) storedEvent(ctx context.Context, tx pgx.Tx, k claimKey, delivered *Event) (*Event, error) {
	in, ok := h.opts.Providers[k.provider]
	if !ok && delivered != nil {
		return delivered, nil
	}
	var payload []byte
	if err := tx.QueryRow(ctx, `SELECT payload FROM webhook_events WHERE provider = $1 AND event_id = $2`,
		k.provider, k.eventID).Scan(&payload); err != nil {
		return nil, fmt.Errorf("webhook: read stored %s event %q: %w", k.provider, k.eventID, err)
	}
	if !ok {
		return nil, fmt.Errorf("webhook: no driver to read stored %s event %q", k.provider, k.eventID)
	}
	ev, err := in.Parse(payload)
	if err != nil { // stored once read; an envelope cannot break since
		return nil, fmt.Errorf("webhook: read stored %s event %q: %w", k.provider, k.eventID, err)
	}
	if ev.ID != k.eventID {
		return nil, fmt.Errorf("webhook: stored %s event %q reads as %q", k.provider, k.eventID, ev.ID)
	}
	return ev, nil
}

// logRedriven logs the orphans a claim re-enqueued.
func (h *handler) logRedriven(ctx context.Context, keys map[claimKey]struct{}) {
	for k := range keys {
		h.opts.Logger.WarnContext(ctx, "webhook: claimed event had no outcome and no live job; re-enqueued its work",
			"provider", k.provider, "event_id", k.eventID)
	}
}

// jobArgs is the job a won claim of ev enqueues in the claim's
// transaction: a fulfilment for a completed payment, a reversal for a
// refund or dispute, nil for an event we only acknowledge or refused.
func jobArgs(ev *Event) river.JobArgs {
	switch {
	case ev.Payment != nil:
		return fulfillment.FulfillOrderArgs{
			OrderID:      ev.Payment.OrderID,
			EventID:      ev.ID,
			Provider:     ev.Provider,
			PaidAmount:   ev.Payment.Amount,
			PaidCurrency: ev.Payment.Currency,
			PaymentID:    ev.Payment.PaymentID,
			Aliases:      ev.Payment.Aliases,
		}
	case ev.Reversal != nil:
		r := ev.Reversal
		return fulfillment.ReversePaymentArgs{Provider: ev.Provider, EventID: ev.ID, PaymentID: r.PaymentID,
			ReversalID: r.ReversalID, ReversalKind: r.Kind, State: r.State, Amount: r.Amount, Currency: r.Currency,
			OtherRef: r.OtherRef}
	}
	return nil
}
