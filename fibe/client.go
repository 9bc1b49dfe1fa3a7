// Package fibe is the Go client for the fibe billing API: wallets and their
// transactions, Mana -> Sparks conversions, checkouts and orders, Marquees
// (a player's Docker hosts), the playgrounds that run on them, and the
// asynchronous requests that create, restart and sync them.
//
// # Safe retries
//
// A request that times out is ambiguous: the server may have done the work
// and lost only the answer. The client therefore sends every POST with an
// Idempotency-Key and retries it with the SAME key, so the server runs it at
// most once and answers a retry with the stored response, flagged by
// Response.IdempotentReplayed. A key is generated per call unless the
// context carries one (WithIdempotencyKey); pass your own key when the call
// itself may be repeated, for example by a job queue that retries your
// code. The server keeps keys for 24 hours.
//
// Retried: transport errors including timeouts, 429, 5xx, and 409
// idempotency_key_in_use (the first copy is still running). Never retried:
// other 4xx answers, or anything once the context is done. Waits grow
// exponentially with jitter up to a cap; a Retry-After header is honoured.
//
// # Errors
//
// Every answer other than 2xx is an *APIError carrying the HTTP status, a
// stable Code (for example "insufficient_balance", "marquee_not_funded",
// "not_found"), the server's RequestID, and whether it was a replay:
//
//	var apiErr *fibe.APIError
//	if errors.As(err, &apiErr) && apiErr.Code == "marquee_not_funded" { ... }
//
// # Rotating the API key
//
// A Client keeps the API key it was made with. An operator rotates a key
// with `billing players keys rotate --player ID`: it prints the new key
// once, and the old key keeps working for 24 hours by default
// (--old-valid-for, --old-valid-until), so a process can move over without
// an outage: make a Client with the new key and swap it in (see the
// example); calls in flight finish under the old key. Idempotency-Keys
// belong to the player, not to the API key, so a call retried with the new
// key and the same Idempotency-Key replays the first answer. A revoked key
// (`billing players keys revoke`), or a rotated one past its time, answers
// 401 "unauthorized" from its next request on; a 401 is never retried.
//
// # Receiving events
//
// billing sends signed events (order.fulfilled, payment.refunded,
// marquee.unfunded, wallet.low_balance, ...) to the webhook endpoints an
// operator registers (`billing endpoints add URL`, which prints the
// endpoint's whsec_ secret once). A WebhookVerifier made with that secret
// checks a delivery's Standard Webhooks headers and signature and returns
// its Event; Event.Decode gives its data as a typed struct. Deliveries
// come at least once and in no promised order: deduplicate on Event.ID
// (the webhook-id header) and drop an event whose Sequence is below the
// highest you applied for the player. docs/contract.md ("Events billing
// sends") is the catalogue and the delivery schedule.
//
// This package uses only the standard library.
package fibe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Version is this SDK's version, sent in the User-Agent.
const Version = "0.1.0"

// Defaults of the client's options.
const (
	DefaultMaxRetries   = 3
	DefaultMinBackoff   = 200 * time.Millisecond
	DefaultMaxBackoff   = 5 * time.Second
	DefaultTimeout      = 30 * time.Second
	DefaultPollInterval = 500 * time.Millisecond
	maxResponseBytes    = 10 << 20
)

// Client talks to one billing server with one API key. It is safe for
// concurrent use.
type Client struct {
	baseURL      string
	apiKey       string
	httpClient   *http.Client
	maxRetries   int
	minBackoff   time.Duration
	maxBackoff   time.Duration
	pollInterval time.Duration
	timeout      time.Duration
	userAgent    string

	Wallets     *WalletsService
	Conversions *ConversionsService
	Checkouts   *CheckoutsService
	Orders      *OrdersService
	Marquees    *MarqueesService
	Playgrounds *PlaygroundsService
	Requests    *RequestsService
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient uses hc for every attempt. Its Timeout bounds one attempt.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.httpClient = hc } }

// WithTimeout bounds each attempt (not the whole call: use the context for
// that). A timed-out attempt is retried with the same idempotency key.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithMaxRetries sets how many times a call is retried after its first
// attempt; 0 disables retries.
func WithMaxRetries(n int) Option {
	return func(c *Client) {
		if n >= 0 {
			c.maxRetries = n
		}
	}
}

// WithBackoff sets the first retry's wait and the cap: waits double per
// attempt, with jitter, up to max.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) {
		if min > 0 && max >= min {
			c.minBackoff, c.maxBackoff = min, max
		}
	}
}

// WithPollInterval sets how often Requests.Wait polls.
func WithPollInterval(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.pollInterval = d
		}
	}
}

// WithUserAgent prefixes the User-Agent header (for example "my-app/1.2").
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua + " " + c.userAgent }
}

// NewClient returns a client for the server at baseURL (for example
// "https://billing.example.com") using apiKey as its bearer token.
func NewClient(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		baseURL:      strings.TrimRight(baseURL, "/"),
		apiKey:       apiKey,
		httpClient:   &http.Client{Timeout: DefaultTimeout},
		maxRetries:   DefaultMaxRetries,
		minBackoff:   DefaultMinBackoff,
		maxBackoff:   DefaultMaxBackoff,
		pollInterval: DefaultPollInterval,
		userAgent:    "fibe-go/" + Version,
	}
	for _, o := range opts {
		o(c)
	}
	if c.timeout > 0 {
		hc := *c.httpClient // never modify the caller's client
		hc.Timeout = c.timeout
		c.httpClient = &hc
	}
	c.Wallets = &WalletsService{c}
	c.Conversions = &ConversionsService{c}
	c.Checkouts = &CheckoutsService{c}
	c.Orders = &OrdersService{c}
	c.Marquees = &MarqueesService{c}
	c.Playgrounds = &PlaygroundsService{c}
	c.Requests = &RequestsService{c}
	return c
}

type idempotencyKeyCtx struct{}

// NewIdempotencyKey returns a fresh key: 16 random bytes, hex encoded.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return short)
	return hex.EncodeToString(b[:])
}

// WithIdempotencyKey makes every POST made with ctx (or a context derived
// from it) use key, on its first attempt and on every retry. Use one such
// context per logical operation: two different POSTs sharing it send the
// same key, and the server refuses the second (422 idempotency_key_reused).
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKeyCtx{}, key)
}

// Response describes the HTTP answer a result came from.
type Response struct {
	StatusCode int
	// RequestID is the server's id for this answer (X-Request-Id); quote it
	// when reporting a problem.
	RequestID string
	// IdempotencyKey is the key the call was sent with (POST only).
	IdempotencyKey string
	// IdempotentReplayed is true when the server had already run this
	// request (an earlier attempt, or another call with the same key) and
	// answered with its stored response.
	IdempotentReplayed bool
	// Attempts is how many attempts the call took.
	Attempts int
	Header   http.Header
}

// call is one API call: built once, attempted up to maxRetries+1 times.
type call struct {
	method string
	path   string
	query  url.Values
	body   []byte
	key    string
}

// do runs the call with retries and decodes a 2xx body into out.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) (*Response, error) {
	cl := &call{method: method, path: path, query: query}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("fibe: encode request: %w", err)
		}
		cl.body = b
	}
	if method == http.MethodPost {
		cl.key, _ = ctx.Value(idempotencyKeyCtx{}).(string)
		if cl.key == "" {
			cl.key = NewIdempotencyKey()
		}
	}
	for attempt := 1; ; attempt++ {
		resp, wait, err := c.attempt(ctx, cl, attempt, out)
		if err == nil || wait < 0 || attempt > c.maxRetries {
			return resp, err
		}
		if err := sleep(ctx, c.backoff(attempt, wait)); err != nil {
			return nil, err
		}
	}
}

// attempt makes one try. wait < 0 means the error is final; otherwise it
// may be retried after at least wait (a Retry-After, or 0).
func (c *Client) attempt(ctx context.Context, cl *call, n int, out any) (*Response, time.Duration, error) {
	req, err := c.newRequest(ctx, cl)
	if err != nil {
		return nil, -1, err
	}
	httpResp, err := c.httpClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, -1, ctx.Err()
		}
		return nil, 0, fmt.Errorf("fibe: %s %s: %w", cl.method, cl.path, err)
	}
	defer httpResp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(httpResp.Body, maxResponseBytes))
	if err != nil {
		if ctx.Err() != nil {
			return nil, -1, ctx.Err()
		}
		return nil, 0, fmt.Errorf("fibe: %s %s: read response: %w", cl.method, cl.path, err)
	}
	resp := &Response{
		StatusCode:         httpResp.StatusCode,
		RequestID:          httpResp.Header.Get("X-Request-Id"),
		IdempotencyKey:     cl.key,
		IdempotentReplayed: httpResp.Header.Get("X-Idempotent-Replayed") == "true",
		Attempts:           n,
		Header:             httpResp.Header,
	}
	if httpResp.StatusCode >= 200 && httpResp.StatusCode < 300 {
		if out != nil && len(body) > 0 {
			if err := json.Unmarshal(body, out); err != nil {
				return resp, -1, fmt.Errorf("fibe: decode %s %s: %w", cl.method, cl.path, err)
			}
		}
		return resp, 0, nil
	}
	apiErr := newAPIError(resp, body)
	if !apiErr.retryable() {
		return resp, -1, apiErr
	}
	return resp, retryAfter(httpResp.Header.Get("Retry-After")), apiErr
}

func (c *Client) newRequest(ctx context.Context, cl *call) (*http.Request, error) {
	u := c.baseURL + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("fibe: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.key != "" {
		req.Header.Set("Idempotency-Key", cl.key)
	}
	return req, nil
}

// backoff is the wait before retry number attempt: exponential from
// minBackoff, capped, with jitter in [d/2, d] so that many clients do not
// retry in lockstep; never less than the server's Retry-After.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := c.maxBackoff
	if attempt-1 < 30 {
		if e := c.minBackoff << (attempt - 1); e > 0 && e < d {
			d = e
		}
	}
	d = d/2 + mrand.N(d/2+1)
	return max(d, retryAfter)
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// APIError is a non-2xx answer from the server.
type APIError struct {
	StatusCode int
	// Code is stable and machine-readable, e.g. "insufficient_balance".
	Code string
	// Message is a human-readable explanation.
	Message   string
	RequestID string
	// IdempotentReplayed is true when this error is the stored answer of an
	// earlier request with the same idempotency key.
	IdempotentReplayed bool
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("fibe: %d %s", e.StatusCode, e.Code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " (request " + e.RequestID + ")"
	}
	return s
}

func (e *APIError) retryable() bool {
	switch {
	case e.StatusCode == http.StatusTooManyRequests, e.StatusCode >= 500:
		return true
	case e.StatusCode == http.StatusConflict && e.Code == "idempotency_key_in_use":
		return true
	}
	return false
}

func newAPIError(resp *Response, body []byte) *APIError {
	e := &APIError{StatusCode: resp.StatusCode, RequestID: resp.RequestID, IdempotentReplayed: resp.IdempotentReplayed}
	var problem struct {
		Title  string `json:"title"`
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &problem) == nil {
		e.Code, e.Message = problem.Code, problem.Detail
		if e.Message == "" {
			e.Message = problem.Title
		}
	}
	if e.Code == "" {
		e.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
	}
	if e.Message == "" {
		e.Message = strings.TrimSpace(string(body))
	}
	return e
}

// IsCode reports whether err is an *APIError with the given code.
func IsCode(err error, code string) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}
