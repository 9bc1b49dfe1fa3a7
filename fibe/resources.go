package fibe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// Currencies.
const (
	Mana   = "mana"
	Sparks = "sparks"
)

// Balance is one wallet's balance.
type Balance struct {
	Balance int64 `json:"balance"`
}

// Wallets are a player's balances.
type Wallets struct {
	Mana         Balance   `json:"mana"`
	Sparks       Balance   `json:"sparks"`
	LastResponse *Response `json:"-"`
}

// Transaction is one wallet movement. Amount is signed: positive for a
// credit, negative for a debit.
type Transaction struct {
	ID           string    `json:"id"`
	Currency     string    `json:"currency"`
	Amount       int64     `json:"amount"`
	Kind         string    `json:"kind"`
	Reference    string    `json:"reference"`
	BalanceAfter int64     `json:"balance_after"`
	CreatedAt    time.Time `json:"created_at"`
}

// TransactionList is one page of transactions, newest first.
type TransactionList struct {
	Data    []*Transaction `json:"data"`
	HasMore bool           `json:"has_more"`
	// NextBefore is the Before of the next page when HasMore.
	NextBefore   string    `json:"next_before,omitempty"`
	LastResponse *Response `json:"-"`
}

// ListParams page through a list. Before is an id from a previous page.
type ListParams struct {
	Limit  int
	Before string
}

// WalletsService reads balances and transactions.
type WalletsService struct{ c *Client }

// Get returns the player's Mana and Sparks balances.
func (s *WalletsService) Get(ctx context.Context) (*Wallets, error) {
	var out Wallets
	resp, err := s.c.do(ctx, http.MethodGet, "/v1/wallets", nil, nil, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// Transactions lists one currency's transactions, newest first.
func (s *WalletsService) Transactions(ctx context.Context, currency string, p *ListParams) (*TransactionList, error) {
	q := url.Values{}
	if p != nil && p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p != nil && p.Before != "" {
		q.Set("before", p.Before)
	}
	var out TransactionList
	resp, err := s.c.do(ctx, http.MethodGet, "/v1/wallets/"+url.PathEscape(currency)+"/transactions", q, nil, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// Conversion is a Mana -> Sparks conversion: both legs.
type Conversion struct {
	ManaDebit    *Transaction `json:"mana_debit"`
	SparksCredit *Transaction `json:"sparks_credit"`
	LastResponse *Response    `json:"-"`
}

// ConversionParams create a conversion of Mana into Sparks (one way).
type ConversionParams struct {
	Mana int64 `json:"mana"`
}

// ConversionsService converts Mana into Sparks.
type ConversionsService struct{ c *Client }

// Create converts p.Mana into Sparks at the server's rate. It fails with
// code insufficient_balance (409) when the Mana balance is too low, and
// outstanding_debt (409) while the player owes Mana after a refund or
// chargeback.
func (s *ConversionsService) Create(ctx context.Context, p ConversionParams) (*Conversion, error) {
	var out Conversion
	resp, err := s.c.do(ctx, http.MethodPost, "/v1/conversions", nil, p, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// Order statuses.
const (
	OrderPending   = "pending"
	OrderFulfilled = "fulfilled"
	OrderRejected  = "rejected"
	// A fulfilled order whose money went (partly) back.
	OrderRefunded          = "refunded"
	OrderPartiallyRefunded = "partially_refunded"
	OrderDisputed          = "disputed"
)

// Order is a Mana purchase with the price it was created at.
type Order struct {
	ID        string    `json:"id"`
	SKU       string    `json:"sku"`
	Provider  string    `json:"provider"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	Mana      int64     `json:"mana"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	// CheckoutURL is the payment provider's hosted checkout of a pending
	// order: send the customer there to pay.
	CheckoutURL  string    `json:"checkout_url,omitempty"`
	LastResponse *Response `json:"-"`

	// RefundedAmount is what the provider refunded, in Currency's minor
	// units; ClawedBackMana the Mana taken back for refunds and disputes.
	RefundedAmount int64 `json:"refunded_amount"`
	ClawedBackMana int64 `json:"clawed_back_mana"`

	// Payments are the payments received for the order, oldest first, each
	// with its refunds and disputes: set by OrdersService.Get (empty while
	// nothing was paid), not by CheckoutsService.Create.
	Payments []OrderPayment `json:"payments,omitempty"`
}

// Unapplied returns the order's payments that minted nothing and were not
// given back in full: a customer charged twice has one here until the
// second payment is refunded.
func (o *Order) Unapplied() []OrderPayment {
	var out []OrderPayment
	for _, p := range o.Payments {
		if p.Status == PaymentUnapplied {
			out = append(out, p)
		}
	}
	return out
}

// Payment statuses (OrderPayment.Status).
const (
	PaymentApplied           = "applied"            // it minted the order's Mana
	PaymentUnapplied         = "unapplied"          // it minted nothing and is to be refunded
	PaymentPartiallyRefunded = "partially_refunded" // applied, part of it refunded
	PaymentRefunded          = "refunded"           // all of it refunded
)

// OrderPayment is one payment the provider reported for an order.
type OrderPayment struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"` // the provider's id of the payment
	Amount    int64  `json:"amount"`     // minor units of Currency
	Currency  string `json:"currency"`
	Status    string `json:"status"`
	// RefundedAmount is what its refunds gave back, at most Amount.
	RefundedAmount int64     `json:"refunded_amount"`
	Mana           int64     `json:"mana"` // Mana it minted: 0 when unapplied
	CreatedAt      time.Time `json:"created_at"`
	// Reversals are its refunds and disputes as the provider reported them.
	Reversals []PaymentReversal `json:"reversals"`
}

// PaymentReversal is a refund or a dispute of a payment.
type PaymentReversal struct {
	ID        string    `json:"id"`    // the provider's refund or dispute id, as billing keys it
	Kind      string    `json:"kind"`  // "refund" or "dispute"
	State     string    `json:"state"` // "succeeded" (refunds); "open", "won" or "lost" (disputes)
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CheckoutParams start a purchase of a SKU through a payment provider
// ("stripe", "paddle" or "creem").
type CheckoutParams struct {
	SKU      string `json:"sku"`
	Provider string `json:"provider"`
}

// CheckoutsService starts purchases.
type CheckoutsService struct{ c *Client }

// Create makes a pending order with its pricing snapshot and opens the
// provider's hosted checkout for it (Order.CheckoutURL). A provider that is
// down answers 503 with Retry-After; retrying with the same Idempotency-Key
// resumes the same order.
func (s *CheckoutsService) Create(ctx context.Context, p CheckoutParams) (*Order, error) {
	var out Order
	resp, err := s.c.do(ctx, http.MethodPost, "/v1/checkouts", nil, p, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// OrdersService reads orders.
type OrdersService struct{ c *Client }

// Get returns one of the player's orders with its payments (Payments):
// whether the customer was charged twice, and what went back. Another
// player's order is not_found (404).
func (s *OrdersService) Get(ctx context.Context, id string) (*Order, error) {
	var out Order
	resp, err := s.c.do(ctx, http.MethodGet, "/v1/orders/"+url.PathEscape(id), nil, nil, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// Marquee is a player's Docker host, funded daily in Sparks.
type Marquee struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Plan        string     `json:"plan"`
	DailyPrice  int64      `json:"daily_price"`
	Funded      bool       `json:"funded"`
	PaidThrough *time.Time `json:"paid_through"`
	Status      string     `json:"status"`
	// LastResponse is set on results of Create and Get.
	LastResponse *Response `json:"-"`
}

// MarqueeList is the player's Marquees.
type MarqueeList struct {
	Data         []*Marquee `json:"data"`
	LastResponse *Response  `json:"-"`
}

// MarqueeParams create a Marquee on a plan.
type MarqueeParams struct {
	Name string `json:"name"`
	Plan string `json:"plan"`
}

// Accepted answers an asynchronous operation: poll RequestID with
// Requests.Get or Requests.Wait.
type Accepted struct {
	RequestID    string    `json:"request_id"`
	PlaygroundID string    `json:"playground_id,omitempty"`
	LastResponse *Response `json:"-"`
}

// MarqueesService manages Marquees.
type MarqueesService struct{ c *Client }

// Create makes a Marquee; it is not funded until its first funding.
func (s *MarqueesService) Create(ctx context.Context, p MarqueeParams) (*Marquee, error) {
	var out Marquee
	resp, err := s.c.do(ctx, http.MethodPost, "/v1/marquees", nil, p, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// Get returns one Marquee.
func (s *MarqueesService) Get(ctx context.Context, id string) (*Marquee, error) {
	var out Marquee
	resp, err := s.c.do(ctx, http.MethodGet, "/v1/marquees/"+url.PathEscape(id), nil, nil, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// List returns the player's Marquees.
func (s *MarqueesService) List(ctx context.Context) (*MarqueeList, error) {
	var out MarqueeList
	resp, err := s.c.do(ctx, http.MethodGet, "/v1/marquees", nil, nil, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// Fund asks for today's funding now instead of at the next sweep.
func (s *MarqueesService) Fund(ctx context.Context, id string) (*Accepted, error) {
	return s.c.accepted(ctx, "/v1/marquees/"+url.PathEscape(id)+"/fund", nil)
}

// Playground statuses.
const (
	PlaygroundProvisioning = "provisioning"
	PlaygroundRunning      = "running"
)

// Playground is a workload on a Marquee.
type Playground struct {
	ID           string     `json:"id"`
	MarqueeID    string     `json:"marquee_id"`
	Name         string     `json:"name"`
	Status       string     `json:"status"`
	CreatedAt    time.Time  `json:"created_at"`
	RunningAt    *time.Time `json:"running_at"`
	RestartedAt  *time.Time `json:"restarted_at"`
	RestartCount int        `json:"restart_count"`
	SyncedAt     *time.Time `json:"synced_at"`
	SyncCount    int        `json:"sync_count"`
	LastResponse *Response  `json:"-"`
}

// PlaygroundParams create a playground. An empty Name is left out of the
// request, and the server names the playground "playground"; a name is at
// most 200 printable characters.
type PlaygroundParams struct {
	Name string `json:"name,omitempty"`
}

// PlaygroundsService creates, restarts and syncs playgrounds. Each
// operation is asynchronous and needs a funded Marquee: otherwise it fails
// with code marquee_not_funded (402) and nothing is queued.
type PlaygroundsService struct{ c *Client }

// Create queues a new playground on a Marquee.
func (s *PlaygroundsService) Create(ctx context.Context, marqueeID string, p PlaygroundParams) (*Accepted, error) {
	return s.c.accepted(ctx, "/v1/marquees/"+url.PathEscape(marqueeID)+"/playgrounds", p)
}

// Restart queues a restart.
func (s *PlaygroundsService) Restart(ctx context.Context, id string) (*Accepted, error) {
	return s.c.accepted(ctx, "/v1/playgrounds/"+url.PathEscape(id)+"/restart", nil)
}

// Sync queues a sync.
func (s *PlaygroundsService) Sync(ctx context.Context, id string) (*Accepted, error) {
	return s.c.accepted(ctx, "/v1/playgrounds/"+url.PathEscape(id)+"/sync", nil)
}

// Get returns one playground.
func (s *PlaygroundsService) Get(ctx context.Context, id string) (*Playground, error) {
	var out Playground
	resp, err := s.c.do(ctx, http.MethodGet, "/v1/playgrounds/"+url.PathEscape(id), nil, nil, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

func (c *Client) accepted(ctx context.Context, path string, in any) (*Accepted, error) {
	var out Accepted
	resp, err := c.do(ctx, http.MethodPost, path, nil, in, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// Request statuses. Succeeded, Failed and Cancelled are terminal.
const (
	RequestQueued    = "queued"
	RequestRunning   = "running"
	RequestSucceeded = "succeeded"
	RequestFailed    = "failed"
	RequestCancelled = "cancelled"
)

// Request is an asynchronous operation.
type Request struct {
	ID string `json:"id"`
	// Kind is fund, playground_create, playground_restart or playground_sync;
	// Target names what it acts on, e.g. "playground:7".
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Status string `json:"status"`
	// Result is the operation's output once succeeded (may be null).
	Result json.RawMessage `json:"result"`
	// Error is the last error: why it failed, or why a queued retry is pending.
	Error        string    `json:"error"`
	LastResponse *Response `json:"-"`
}

// Done reports whether the request reached a terminal status.
func (r *Request) Done() bool {
	return r.Status == RequestSucceeded || r.Status == RequestFailed || r.Status == RequestCancelled
}

// Request kinds.
const (
	KindFund              = "fund"
	KindPlaygroundCreate  = "playground_create"
	KindPlaygroundRestart = "playground_restart"
	KindPlaygroundSync    = "playground_sync"
)

// FundResult is the Result of a succeeded fund request.
type FundResult struct {
	MarqueeID string `json:"marquee_id"`
	Day       string `json:"day"`
	// Outcome is funded, already_paid, insufficient, stopped or not_due (a
	// day that has not begun, the day before it unpaid: nothing debited).
	Outcome       string     `json:"outcome"`
	TransactionID string     `json:"transaction_id,omitempty"`
	PaidThrough   *time.Time `json:"paid_through,omitempty"`
	Error         string     `json:"error,omitempty"`
}

// ErrNoResult is returned by FundResult and PlaygroundResult for a request
// of another kind, or one without a result yet (not succeeded).
var ErrNoResult = errors.New("fibe: the request has no result of that kind")

// FundResult decodes the Result of a succeeded fund request.
func (r *Request) FundResult() (*FundResult, error) {
	var out FundResult
	if err := r.decodeResult(&out, KindFund); err != nil {
		return nil, err
	}
	return &out, nil
}

// PlaygroundResult decodes the Result of a succeeded playground request
// (create, restart or sync): the playground after the operation.
func (r *Request) PlaygroundResult() (*Playground, error) {
	var out Playground
	if err := r.decodeResult(&out, KindPlaygroundCreate, KindPlaygroundRestart, KindPlaygroundSync); err != nil {
		return nil, err
	}
	return &out, nil
}

func (r *Request) decodeResult(dst any, kinds ...string) error {
	if !slices.Contains(kinds, r.Kind) || r.Status != RequestSucceeded || len(r.Result) == 0 || string(r.Result) == "null" {
		return fmt.Errorf("%w (kind %s, status %s)", ErrNoResult, r.Kind, r.Status)
	}
	if err := json.Unmarshal(r.Result, dst); err != nil {
		return fmt.Errorf("fibe: decode %s result: %w", r.Kind, err)
	}
	return nil
}

// RequestsService polls asynchronous requests.
type RequestsService struct{ c *Client }

// Get returns a request's current status.
func (s *RequestsService) Get(ctx context.Context, id string) (*Request, error) {
	var out Request
	resp, err := s.c.do(ctx, http.MethodGet, "/v1/requests/"+url.PathEscape(id), nil, nil, &out)
	return withResponse(&out, &out.LastResponse, resp, err)
}

// Wait polls a request until it is succeeded, failed or cancelled, or ctx
// is done. A failed or cancelled request is returned without an error:
// check Status.
func (s *RequestsService) Wait(ctx context.Context, id string) (*Request, error) {
	for {
		r, err := s.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if r.Done() {
			return r, nil
		}
		if err := sleep(ctx, s.c.pollInterval); err != nil {
			return r, err
		}
	}
}

// withResponse attaches resp to a successful result.
func withResponse[T any](out *T, slot **Response, resp *Response, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	*slot = resp
	return out, nil
}
