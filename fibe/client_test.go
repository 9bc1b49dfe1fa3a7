package fibe_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fibe"
)

// scripted is a server that answers each attempt from a script and records
// what it received.
type scripted struct {
	mu       sync.Mutex
	answers  []func(w http.ResponseWriter, r *http.Request)
	keys     []string
	bodies   []string
	auth     []string
	arrivals []time.Time
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.keys)
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.bodies = append(s.bodies, string(b))
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.arrivals = append(s.arrivals, time.Now())
	answer := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	answer(w, r)
}

func (s *scripted) attempts() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.keys) }

func problem(status int, code string, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("X-Request-Id", "req_123")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"title":"x","status":0,"code":"`+code+`","detail":"details here"}`)
	}
}

func created(body string, replayed bool) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if replayed {
			w.Header().Set("X-Idempotent-Replayed", "true")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, body)
	}
}

const conversionBody = `{"mana_debit":{"id":"1","currency":"mana","amount":-5,"balance_after":95},"sparks_credit":{"id":"2","currency":"sparks","amount":5,"balance_after":5}}`

func newClient(t *testing.T, s *scripted, opts ...fibe.Option) *fibe.Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	opts = append([]fibe.Option{fibe.WithBackoff(time.Millisecond, 5*time.Millisecond)}, opts...)
	return fibe.NewClient(srv.URL, "bk_test", opts...)
}

func TestRetriesCarryTheSameKey(t *testing.T) {
	t.Parallel()
	s := &scripted{answers: []func(http.ResponseWriter, *http.Request){
		problem(http.StatusInternalServerError, "internal"),
		problem(http.StatusServiceUnavailable, "unavailable"),
		problem(http.StatusConflict, "idempotency_key_in_use"),
		created(conversionBody, true),
	}}
	c := newClient(t, s)
	conv, err := c.Conversions.Create(context.Background(), fibe.ConversionParams{Mana: 5})
	require.NoError(t, err)
	require.Equal(t, 4, s.attempts())
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), s.keys[0])
	for i := range s.keys {
		require.Equal(t, s.keys[0], s.keys[i], "attempt %d", i)
		require.JSONEq(t, `{"mana":5}`, s.bodies[i])
		require.Equal(t, "Bearer bk_test", s.auth[i])
	}
	require.EqualValues(t, -5, conv.ManaDebit.Amount)
	require.Equal(t, "2", conv.SparksCredit.ID)
	require.True(t, conv.LastResponse.IdempotentReplayed)
	require.Equal(t, 4, conv.LastResponse.Attempts)
	require.Equal(t, s.keys[0], conv.LastResponse.IdempotencyKey)
}

func TestCallsGetDistinctKeysUnlessGivenOne(t *testing.T) {
	t.Parallel()
	s := &scripted{answers: []func(http.ResponseWriter, *http.Request){created(conversionBody, false)}}
	c := newClient(t, s)
	ctx := context.Background()
	_, err := c.Conversions.Create(ctx, fibe.ConversionParams{Mana: 5})
	require.NoError(t, err)
	_, err = c.Conversions.Create(ctx, fibe.ConversionParams{Mana: 5})
	require.NoError(t, err)
	require.NotEqual(t, s.keys[0], s.keys[1])

	kctx := fibe.WithIdempotencyKey(ctx, "my-own-key")
	_, err = c.Conversions.Create(kctx, fibe.ConversionParams{Mana: 5})
	require.NoError(t, err)
	require.Equal(t, "my-own-key", s.keys[2])
	_, err = c.Wallets.Get(ctx)
	require.NoError(t, err)
	require.Empty(t, s.keys[3], "GETs carry no key")
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusConflict, "insufficient_balance"},
		{http.StatusBadRequest, "invalid_request"},
		{http.StatusPaymentRequired, "marquee_not_funded"},
		{http.StatusNotFound, "not_found"},
		{http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{http.StatusUnauthorized, "unauthorized"},
	} {
		s := &scripted{answers: []func(http.ResponseWriter, *http.Request){problem(tc.status, tc.code, "X-Idempotent-Replayed", "true")}}
		c := newClient(t, s)
		_, err := c.Conversions.Create(context.Background(), fibe.ConversionParams{Mana: 5})
		var apiErr *fibe.APIError
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, tc.status, apiErr.StatusCode)
		require.Equal(t, tc.code, apiErr.Code)
		require.Equal(t, "details here", apiErr.Message)
		require.Equal(t, "req_123", apiErr.RequestID)
		require.True(t, apiErr.IdempotentReplayed)
		require.True(t, fibe.IsCode(err, tc.code))
		require.Equal(t, 1, s.attempts(), "%d is final", tc.status)
	}
}

func TestRetryCountIsConfigurable(t *testing.T) {
	t.Parallel()
	s := &scripted{answers: []func(http.ResponseWriter, *http.Request){problem(http.StatusBadGateway, "bad_gateway")}}
	c := newClient(t, s, fibe.WithMaxRetries(5))
	_, err := c.Wallets.Get(context.Background())
	require.True(t, fibe.IsCode(err, "bad_gateway"))
	require.Equal(t, 6, s.attempts())

	s2 := &scripted{answers: s.answers}
	c = newClient(t, s2, fibe.WithMaxRetries(0))
	_, err = c.Wallets.Get(context.Background())
	require.Error(t, err)
	require.Equal(t, 1, s2.attempts())
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	s := &scripted{answers: []func(http.ResponseWriter, *http.Request){
		problem(http.StatusTooManyRequests, "rate_limited", "Retry-After", "1"),
		created(conversionBody, false),
	}}
	c := newClient(t, s)
	_, err := c.Conversions.Create(context.Background(), fibe.ConversionParams{Mana: 5})
	require.NoError(t, err)
	require.GreaterOrEqual(t, s.arrivals[1].Sub(s.arrivals[0]), time.Second)
}

func TestTimeoutsAreRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := &scripted{answers: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) { <-release }, // never answers in time
		created(conversionBody, true),
	}}
	// The first attempt never answers, so it times out and is retried; on
	// a busy machine a later attempt may time out too before its answer
	// arrives, so the count is at least two, each under the same key.
	c := newClient(t, s, fibe.WithTimeout(500*time.Millisecond))
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	conv, err := c.Conversions.Create(context.Background(), fibe.ConversionParams{Mana: 5})
	require.NoError(t, err)
	require.True(t, conv.LastResponse.IdempotentReplayed)
	require.GreaterOrEqual(t, s.attempts(), 2)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		require.Equal(t, s.keys[0], k, "every attempt carries the first attempt's key")
	}
}

func TestNoRetryOnceContextIsDone(t *testing.T) {
	t.Parallel()
	s := &scripted{answers: []func(http.ResponseWriter, *http.Request){problem(http.StatusServiceUnavailable, "unavailable", "Retry-After", "30")}}
	c := newClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Conversions.Create(ctx, fibe.ConversionParams{Mana: 5})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, 1, s.attempts())
}

func TestTransportErrorsAreRetried(t *testing.T) {
	t.Parallel()
	s := &scripted{answers: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }, // connection dropped
		created(conversionBody, false),
	}}
	c := newClient(t, s)
	_, err := c.Conversions.Create(context.Background(), fibe.ConversionParams{Mana: 5})
	require.NoError(t, err)
	require.Equal(t, 2, s.attempts())
	require.Equal(t, s.keys[0], s.keys[1])
}

func TestWaitPollsUntilTerminal(t *testing.T) {
	t.Parallel()
	reply := func(status string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			require.Equal(t, "/v1/requests/7", r.URL.Path)
			_, _ = io.WriteString(w, `{"id":"7","status":"`+status+`","result":{"playground_id":"3"},"error":""}`)
		}
	}
	s := &scripted{answers: []func(http.ResponseWriter, *http.Request){reply("queued"), reply("running"), reply("succeeded")}}
	c := newClient(t, s, fibe.WithPollInterval(time.Millisecond))
	r, err := c.Requests.Wait(context.Background(), "7")
	require.NoError(t, err)
	require.Equal(t, fibe.RequestSucceeded, r.Status)
	require.JSONEq(t, `{"playground_id":"3"}`, string(r.Result))
	require.Equal(t, 3, s.attempts())

	// Wait gives up when ctx does.
	s2 := &scripted{answers: []func(http.ResponseWriter, *http.Request){reply("queued")}}
	c = newClient(t, s2, fibe.WithPollInterval(10*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.Requests.Wait(ctx, "7")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestNewIdempotencyKey(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		k := fibe.NewIdempotencyKey()
		require.Len(t, k, 32)
		require.False(t, seen[k])
		seen[k] = true
	}
}

func TestAPIErrorMessage(t *testing.T) {
	t.Parallel()
	err := error(&fibe.APIError{StatusCode: 402, Code: "marquee_not_funded", Message: "fund it", RequestID: "r1"})
	require.Equal(t, "fibe: 402 marquee_not_funded: fund it (request r1)", err.Error())
	var apiErr *fibe.APIError
	require.True(t, errors.As(fmtWrap(err), &apiErr))
	require.True(t, strings.HasPrefix(apiErr.Error(), "fibe: 402"))
}

func fmtWrap(err error) error { return errors.Join(errors.New("context"), err) }
