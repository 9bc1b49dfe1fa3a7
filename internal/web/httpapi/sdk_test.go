package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fibe"
	"github.com/fibe-dev/billing/wallet"
)

// dropProxy forwards to the real server and, for the first POST to each
// path, lets the server finish (and commit) but never answers the client,
// which therefore times out: the ambiguous failure the SDK must survive.
type dropProxy struct {
	target  string
	mu      sync.Mutex
	dropped map[string]bool
	drops   atomic.Int64
}

func (p *dropProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(resp.Body) // the server has answered: its work is committed
	p.mu.Lock()
	drop := r.Method == http.MethodPost && !p.dropped[r.URL.Path]
	p.dropped[r.URL.Path] = true
	p.mu.Unlock()
	if drop {
		p.drops.Add(1)
		<-r.Context().Done() // hold the connection until the client gives up
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

func TestSDKRetriesThroughLostResponses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 1000)
	marquee := e.fundedMarquee(alice)
	proxy := &dropProxy{target: e.srv.URL, dropped: map[string]bool{}}
	ps := httptest.NewServer(proxy)
	t.Cleanup(ps.Close)
	client := fibe.NewClient(ps.URL, alice.key, fibe.WithTimeout(time.Second), fibe.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	ctx := context.Background()

	conv, err := client.Conversions.Create(ctx, fibe.ConversionParams{Mana: 40})
	require.NoError(t, err)
	requireReplayedSecondAttempt(t, conv.LastResponse)
	require.EqualValues(t, 960, conv.ManaDebit.BalanceAfter)

	order, err := client.Checkouts.Create(ctx, fibe.CheckoutParams{SKU: "mana_1000", Provider: "creem"})
	require.NoError(t, err)
	requireReplayedSecondAttempt(t, order.LastResponse)
	require.Equal(t, fibe.OrderPending, order.Status)

	acc, err := client.Playgrounds.Create(ctx, idStr(marquee), fibe.PlaygroundParams{Name: "safe"})
	require.NoError(t, err)
	requireReplayedSecondAttempt(t, acc.LastResponse)
	require.NotEmpty(t, acc.PlaygroundID)

	require.EqualValues(t, 3, proxy.drops.Load(), "each first response was lost")
	require.Equal(t, 2, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`), "ONE conversion (two legs)")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM orders`), "ONE order")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM playgrounds`), "ONE playground")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM river_job WHERE kind = 'playground_create'`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM api_requests`))
	w, err := client.Wallets.Get(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 960, w.Mana.Balance)
	require.EqualValues(t, 900+40, w.Sparks.Balance)
	e.requireAuditClean()
}

func requireReplayedSecondAttempt(t *testing.T, r *fibe.Response) {
	t.Helper()
	require.Equal(t, 2, r.Attempts)
	require.True(t, r.IdempotentReplayed, "the retry's answer is the stored one")
	require.Len(t, r.IdempotencyKey, 32)
	require.NotEmpty(t, r.RequestID)
}

// The SDK end to end against the real server: typed errors, 402, waiting
// for a request, and a replay visible on a repeated key.
func TestSDKAgainstServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 300)
	client := fibe.NewClient(e.srv.URL, alice.key, fibe.WithPollInterval(50*time.Millisecond))
	ctx := context.Background()

	_, err := client.Conversions.Create(ctx, fibe.ConversionParams{Mana: 301})
	var apiErr *fibe.APIError
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, http.StatusConflict, apiErr.StatusCode)
	require.Equal(t, CodeInsufficientBalance, apiErr.Code)
	require.NotEmpty(t, apiErr.RequestID)

	kctx := fibe.WithIdempotencyKey(ctx, fibe.NewIdempotencyKey())
	c1, err := client.Conversions.Create(kctx, fibe.ConversionParams{Mana: 200})
	require.NoError(t, err)
	c2, err := client.Conversions.Create(kctx, fibe.ConversionParams{Mana: 200})
	require.NoError(t, err)
	require.False(t, c1.LastResponse.IdempotentReplayed)
	require.True(t, c2.LastResponse.IdempotentReplayed)
	require.Equal(t, c1.SparksCredit.ID, c2.SparksCredit.ID)
	_, err = client.Conversions.Create(kctx, fibe.ConversionParams{Mana: 1})
	require.True(t, fibe.IsCode(err, CodeIdempotencyKeyReused))

	m, err := client.Marquees.Create(ctx, fibe.MarqueeParams{Name: "sdk", Plan: "standard"})
	require.NoError(t, err)
	require.False(t, m.Funded)
	_, err = client.Playgrounds.Create(ctx, m.ID, fibe.PlaygroundParams{})
	require.True(t, fibe.IsCode(err, CodeMarqueeNotFunded))
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusPaymentRequired, apiErr.StatusCode)

	acc, err := client.Marquees.Fund(ctx, m.ID)
	require.NoError(t, err)
	req, err := client.Requests.Wait(ctx, acc.RequestID)
	require.NoError(t, err)
	require.Equal(t, fibe.RequestSucceeded, req.Status)
	fund, err := req.FundResult()
	require.NoError(t, err)
	require.Equal(t, "funded", fund.Outcome)
	require.Equal(t, m.ID, fund.MarqueeID)
	require.NotEmpty(t, fund.TransactionID)
	_, err = req.PlaygroundResult()
	require.ErrorIs(t, err, fibe.ErrNoResult, "a fund request has no playground result")
	m, err = client.Marquees.Get(ctx, m.ID)
	require.NoError(t, err)
	require.True(t, m.Funded)
	require.NotNil(t, m.PaidThrough)
	require.True(t, fund.PaidThrough.Equal(*m.PaidThrough))

	acc, err = client.Playgrounds.Create(ctx, m.ID, fibe.PlaygroundParams{Name: "pg"})
	require.NoError(t, err)
	req, err = client.Requests.Wait(ctx, acc.RequestID)
	require.NoError(t, err)
	require.Equal(t, fibe.RequestSucceeded, req.Status)
	pg, err := client.Playgrounds.Get(ctx, acc.PlaygroundID)
	require.NoError(t, err)
	require.Equal(t, fibe.PlaygroundRunning, pg.Status)
	created, err := req.PlaygroundResult()
	require.NoError(t, err)
	require.Equal(t, pg.ID, created.ID)
	require.Equal(t, "pg", created.Name)
	list, err := client.Marquees.List(ctx)
	require.NoError(t, err)
	require.Len(t, list.Data, 1)
	txs, err := client.Wallets.Transactions(ctx, fibe.Sparks, &fibe.ListParams{Limit: 1})
	require.NoError(t, err)
	require.Len(t, txs.Data, 1)
	require.True(t, txs.HasMore)
	require.EqualValues(t, -100, txs.Data[0].Amount, "newest first: the funding debit")
	_, err = client.Orders.Get(ctx, "12345")
	require.True(t, fibe.IsCode(err, CodeNotFound))
	e.requireAuditClean()
}
