package fulfillment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/stripemock"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/stripe"
)

// stripeMockBin finds stripe-mock; without it the test is skipped, unless
// CI is set, where it must be installed.
func stripeMockBin(t *testing.T) string {
	t.Helper()
	return stripemock.Bin(t)
}

// refundLog records the refund requests that reach stripe-mock.
type refundLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *refundLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...)
}

// startStripeMock runs stripe-mock on a free local port behind a
// recording proxy and returns the proxy's URL.
func startStripeMock(t *testing.T) (string, *refundLog) {
	t.Helper()
	bin := stripeMockBin(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	cmd := exec.Command(bin, "-http-addr", addr)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitListening(t, addr)
	target, err := url.Parse("http://" + addr)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	log := &refundLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/refunds" {
			log.mu.Lock()
			log.keys = append(log.keys, r.Header.Get("Idempotency-Key"))
			log.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, log
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A second, distinct payment for a paid order (10 deliveries of it under
// fresh event ids, at once) is recorded unapplied once, mints nothing, is
// refunded through Stripe's API (stripe-mock) under one idempotency key,
// and the refund's own webhook claws nothing back.
func TestDoubleChargeUnappliedAndRefundedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	apiURL, refunds := startStripeMock(t)
	pool := testdb.New(t)
	client := startRiverWith(t, pool, fulfillment.WorkerOptions{Refunders: map[string]fulfillment.Refunder{
		provider.Stripe: stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: apiURL})}})
	player := newPlayer(t, pool)
	o := checkout(t, pool, player, "mana_1000", "stripe")
	payWith(t, pool, client, "stripe", "evt_first", "pi_first", o.ID, 999, "usd")
	require.Equal(t, "completed", waitJobs(t, pool, 1)[0].State)

	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() {
			errs[i] = tryPay(pool, client, "stripe", fmt.Sprintf("evt_second_%d", i), "pi_second", o.ID, 999, "usd")
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	jobs := waitJobs(t, pool, 11)
	for _, j := range jobs[1:] {
		require.Equal(t, "cancelled", j.State, j.Errors)
		require.Contains(t, j.Errors[len(j.Errors)-1], "pi_second")
		require.Contains(t, j.Errors[len(j.Errors)-1], "refunded")
	}
	require.Equal(t, int64(1000), manaBalance(t, pool, player))
	ps, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
	require.NoError(t, err)
	require.Len(t, ps, 2)
	require.Equal(t, fulfillment.PaymentApplied, ps[0].Status)
	second := ps[1]
	require.Equal(t, fulfillment.PaymentRefunded, second.Status)
	require.True(t, strings.HasPrefix(second.RefundID, "re_"), second.RefundID)
	require.Zero(t, second.ManaMinted)
	keys := refunds.all()
	require.NotEmpty(t, keys)
	for _, k := range keys {
		require.Equal(t, fulfillment.RefundKey(second.ID), k, "every refund request carries the payment's key")
	}
	unapplied, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{UnappliedOnly: true})
	require.NoError(t, err)
	require.Empty(t, unapplied, "refunded, so no longer waiting for an operator")

	// Stripe then reports the refund: nothing minted, nothing clawed back.
	reverse(t, pool, client, fulfillment.ReversePaymentArgs{Provider: "stripe", EventID: "evt_refund_second",
		PaymentID: "pi_second", ReversalID: "charge:ch_second", ReversalKind: fulfillment.ReversalRefund,
		State: fulfillment.StateSucceeded, Amount: 999, Currency: "usd"})
	require.Equal(t, "completed", waitKind(t, pool, "reverse_payment", 1)[0].State)
	require.Equal(t, int64(1000), manaBalance(t, pool, player))
	got, err := fulfillment.GetOrder(ctx, pool, player, o.ID)
	require.NoError(t, err)
	require.Equal(t, fulfillment.StatusFulfilled, got.Status)
	require.Zero(t, got.RefundedAmount)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind <> 'purchase'`))
	requireClean(t, pool)
}

// Without a refund API (Paddle's driver automates none) the unapplied
// payment waits for an operator, and the cancelled job says to refund it.
func TestDoubleChargeWithoutRefunderAsksOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	client := startRiverWith(t, pool, fulfillment.WorkerOptions{
		Refunders: provider.Select[fulfillment.Refunder](drivers.New(map[string]provider.Options{provider.Paddle: {APIKey: "pdl_key"}}))})
	player := newPlayer(t, pool)
	o := checkout(t, pool, player, "mana_1000", "paddle")
	payWith(t, pool, client, "paddle", "evt_1", "txn_1", o.ID, 999, "usd")
	require.Equal(t, "completed", waitJobs(t, pool, 1)[0].State) // else either payment may be the one that mints
	payWith(t, pool, client, "paddle", "evt_2", "txn_2", o.ID, 999, "usd")
	jobs := waitJobs(t, pool, 2)
	require.Equal(t, "cancelled", jobs[1].State)
	require.Contains(t, jobs[1].Errors[0], "REFUND IT")
	require.Contains(t, jobs[1].Errors[0], "no refund API configured for paddle")
	require.Contains(t, jobs[1].Errors[0], "already paid")
	unapplied, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{UnappliedOnly: true})
	require.NoError(t, err)
	require.Len(t, unapplied, 1)
	require.Equal(t, "txn_2", unapplied[0].PaymentID)
	require.Equal(t, int64(1000), manaBalance(t, pool, player))
	requireClean(t, pool)

	// The operator refunds it in Paddle's dashboard, then marks it: ten
	// operators (or retries) at once change it once.
	id := unapplied[0].ID
	var changed atomic.Int32
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			p, ch, err := fulfillment.MarkRefunded(ctx, pool, id, "re_hand_1")
			if assert.NoError(t, err) && assert.Equal(t, fulfillment.PaymentRefunded, p.Status) && ch {
				changed.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), changed.Load())
	unapplied, err = fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{UnappliedOnly: true})
	require.NoError(t, err)
	require.Empty(t, unapplied)
	_, _, err = fulfillment.MarkRefunded(ctx, pool, id, "re_other")
	require.ErrorIs(t, err, fulfillment.ErrRefundedOtherwise)
	all, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
	require.NoError(t, err)
	require.Len(t, all, 2)
	for _, p := range all {
		if p.Status == fulfillment.PaymentApplied {
			_, _, err = fulfillment.MarkRefunded(ctx, pool, p.ID, "re_hand_2")
			require.ErrorIs(t, err, fulfillment.ErrNotUnapplied, "a minted payment's refunds come as webhooks")
		} else {
			require.Equal(t, "re_hand_1", p.RefundID)
		}
	}
	_, _, err = fulfillment.MarkRefunded(ctx, pool, 1<<40, "re_hand_3")
	require.ErrorIs(t, err, fulfillment.ErrPaymentNotFound)
	for _, bad := range []string{"", string([]byte{0xff}), "a\x00b", strings.Repeat("r", 256)} {
		_, _, err = fulfillment.MarkRefunded(ctx, pool, id, bad)
		require.ErrorIs(t, err, fulfillment.ErrInvalidRefundID, "%q", bad)
	}
	require.Equal(t, int64(1000), manaBalance(t, pool, player), "no money moved")
	requireClean(t, pool)
}

// A payment through another provider than the order's is refused like an
// amount mismatch: order rejected, payment unapplied, nothing minted.
func TestPaymentFromAnotherProviderRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	client := startRiver(t, pool)
	player := newPlayer(t, pool)
	o := checkout(t, pool, player, "mana_1000", "stripe")
	payWith(t, pool, client, "paddle", "evt_p", "txn_p", o.ID, 999, "usd")
	jobs := waitJobs(t, pool, 1)
	require.Equal(t, "cancelled", jobs[0].State)
	require.Contains(t, jobs[0].Errors[0], "opened as a stripe checkout")
	got, err := fulfillment.GetOrder(ctx, pool, player, o.ID)
	require.NoError(t, err)
	require.Equal(t, fulfillment.StatusRejected, got.Status)
	require.Zero(t, manaBalance(t, pool, player))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM payments WHERE status = 'unapplied' AND payment_id = 'txn_p'`))
	requireClean(t, pool)
}

// flakyRefunder fails its first call as a network error would, then
// refunds; it records every key it was asked with.
type flakyRefunder struct {
	mu   sync.Mutex
	keys []string
}

func (f *flakyRefunder) Refund(_ context.Context, r provider.RefundRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, r.IdempotencyKey)
	if len(f.keys) == 1 {
		return "", errors.New("connection reset by peer")
	}
	return "re_fake_" + r.PaymentID, nil
}

// A refund that fails transiently is retried by the job with the same
// provider key (the provider answers a repeated key with the first
// refund), and the payment ends refunded.
func TestUnappliedRefundRetriedWithOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	refunder := &flakyRefunder{}
	client := startRiverWith(t, pool, fulfillment.WorkerOptions{Refunders: map[string]fulfillment.Refunder{"stripe": refunder}})
	player := newPlayer(t, pool)
	o := checkout(t, pool, player, "mana_1000", "stripe")
	payWith(t, pool, client, "stripe", "evt_1", "pi_1", o.ID, 999, "usd")
	require.Equal(t, "completed", waitJobs(t, pool, 1)[0].State)
	payWith(t, pool, client, "stripe", "evt_2", "pi_2", o.ID, 999, "usd")
	jobs := waitJobs(t, pool, 2)
	require.Equal(t, "cancelled", jobs[1].State)
	require.Len(t, jobs[1].Errors, 2, "one failed attempt, then the cancel")
	require.Contains(t, jobs[1].Errors[0], "connection reset")
	require.Contains(t, jobs[1].Errors[1], "refunded automatically as re_fake_pi_2")
	ps, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
	require.NoError(t, err)
	require.Equal(t, fulfillment.PaymentRefunded, ps[1].Status)
	require.Equal(t, []string{fulfillment.RefundKey(ps[1].ID), fulfillment.RefundKey(ps[1].ID)}, refunder.keys)
	require.Equal(t, int64(1000), manaBalance(t, pool, player))
	requireClean(t, pool)
}

// amountRefunder refunds and records each request's key and amount.
type amountRefunder struct {
	mu       sync.Mutex
	requests []provider.RefundRequest
}

func (a *amountRefunder) Refund(_ context.Context, r provider.RefundRequest) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = append(a.requests, r)
	return "re_auto_" + r.PaymentID, nil
}

func (a *amountRefunder) all() []provider.RefundRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]provider.RefundRequest(nil), a.requests...)
}

// Issue 28, finding 6 (Paddle): a duplicate transaction, recorded
// unapplied, that Paddle then refunds in full is refunded: it leaves the
// to-refund list, and an operator cannot be asked to refund it again.
func TestUnappliedRefundedInFullByProviderLeavesTheList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	client := startRiverWith(t, pool, fulfillment.WorkerOptions{
		Refunders: provider.Select[fulfillment.Refunder](drivers.New(map[string]provider.Options{provider.Paddle: {APIKey: "pdl_key"}}))})
	player := newPlayer(t, pool)
	o := checkout(t, pool, player, "mana_1000", "paddle")
	payWith(t, pool, client, "paddle", "evt_1", "txn_1", o.ID, 999, "usd")
	require.Equal(t, "completed", waitJobs(t, pool, 1)[0].State)
	payWith(t, pool, client, "paddle", "evt_2", "txn_2", o.ID, 999, "usd")
	require.Contains(t, waitJobs(t, pool, 2)[1].Errors[0], "REFUND IT")
	unapplied, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{UnappliedOnly: true})
	require.NoError(t, err)
	require.Len(t, unapplied, 1)

	reverse(t, pool, client, fulfillment.ReversePaymentArgs{Provider: "paddle", EventID: "evt_adj", PaymentID: "txn_2",
		ReversalID: "adj_1", ReversalKind: fulfillment.ReversalRefund, State: fulfillment.StateSucceeded, Amount: 999, Currency: "usd"})
	j := waitKind(t, pool, "reverse_payment", 1)[0]
	require.Equal(t, "completed", j.State, j.Errors)
	unapplied, err = fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{UnappliedOnly: true})
	require.NoError(t, err)
	require.Empty(t, unapplied, "Paddle refunded it in full: nothing is left to refund")
	ps, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
	require.NoError(t, err)
	require.Equal(t, fulfillment.PaymentRefunded, ps[1].Status)
	require.Equal(t, "adj_1", ps[1].RefundID)
	require.Equal(t, int64(1000), manaBalance(t, pool, player))
	requireClean(t, pool)

	// A row left unapplied by an older build, its full refund recorded as
	// a fact, is not on the to-refund list either.
	_, err = pool.Exec(ctx, `UPDATE payments SET status = 'unapplied', refund_id = NULL WHERE id = $1`, ps[1].ID)
	require.NoError(t, err)
	unapplied, err = fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{UnappliedOnly: true})
	require.NoError(t, err)
	require.Empty(t, unapplied)
}

// Finding 6 (Stripe): a full refund of the duplicate's PaymentIntent that
// arrives before the duplicate session is its refund: the worker asks
// Stripe for nothing. A partial one leaves only the rest to refund.
func TestUnappliedRefundAsksOnlyWhatFactsLeave(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		refunded int64
		want     []int64 // the amounts asked of the refund API
	}{
		{"in full", 999, nil},
		{"above paid", 5000, nil},
		{"in part", 300, []int64{699}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := testdb.New(t)
			refunder := &amountRefunder{}
			client := startRiverWith(t, pool, fulfillment.WorkerOptions{Refunders: map[string]fulfillment.Refunder{"stripe": refunder}})
			player := newPlayer(t, pool)
			o := checkout(t, pool, player, "mana_1000", "stripe")
			require.NoError(t, tryPayArgs(pool, client, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_1",
				Provider: "stripe", PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_1", Aliases: []string{"pi_1"}}))
			require.Equal(t, "completed", waitJobs(t, pool, 1)[0].State)
			reverse(t, pool, client, fulfillment.ReversePaymentArgs{Provider: "stripe", EventID: "evt_r", PaymentID: "pi_2",
				ReversalID: "charge:ch_2", ReversalKind: fulfillment.ReversalRefund, State: fulfillment.StateSucceeded,
				Amount: c.refunded, Currency: "usd", OtherRef: "ch_2"})
			require.Equal(t, "completed", waitKind(t, pool, "reverse_payment", 1)[0].State)
			require.NoError(t, tryPayArgs(pool, client, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_2",
				Provider: "stripe", PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_2", Aliases: []string{"pi_2"}}))
			j := waitJobs(t, pool, 2)[1]
			require.Equal(t, "cancelled", j.State, j.Errors)
			var asked []int64
			for _, r := range refunder.all() {
				asked = append(asked, r.Amount)
			}
			require.Equal(t, c.want, asked)
			ps, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
			require.NoError(t, err)
			require.Equal(t, fulfillment.PaymentRefunded, ps[1].Status)
			if c.want == nil {
				require.Equal(t, "charge:ch_2", ps[1].RefundID)
				require.Contains(t, j.Errors[len(j.Errors)-1], "refunded as charge:ch_2")
			}
			require.Equal(t, int64(1000), manaBalance(t, pool, player))
			requireClean(t, pool)
		})
	}
}

// waitDeadline bounds each wait on a condition (a server listening, a job
// finished): a second on an idle machine, far more at load 20 on two
// cores, so generous; a failing wait still ends with its message.
const waitDeadline = 2 * time.Minute
