package httpapi

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
	"github.com/fibe-dev/billing/wallet"
)

// TestOpenAPIConformanceProviderAndDebtAnswers drives, through the real
// handlers, the answers the main conformance walk cannot reach in passing:
// a provider that is down (503 + Retry-After), one that refuses (502), a
// SKU priced differently at the provider (500 checkout_misconfigured), a
// player who owes Mana after a real refund (409 outstanding_debt), oversized
// headers (431), duplicate JSON members (400), and an order through each of
// its reverse statuses; every request and answer is checked against the
// document.
func TestOpenAPIConformanceProviderAndDebtAnswers(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(s *setup) {
		s.providers[provider.Stripe].WebhookSecrets = []string{conformanceStripeSecret}
		s.Plans["daily600"] = enforcer.Plan{DailySparks: 600} // spends every Spark of the refund story
	})
	e.startWorker()
	c := newConformance(t, e)
	alice := e.newPlayer("alice")
	c.providerCalls(alice)
	c.requestShapeCalls(alice)
	c.refundCalls(alice)
	c.disputeCalls(alice)
	t.Logf("%d requests and answers validated over %d operations", c.calls, len(c.seen))
	e.requireAuditClean()
}

func (c *conformance) providerCalls(alice player) {
	const stripeBody = `{"sku":"mana_1000","provider":"stripe"}`
	c.e.fake.SetDown(true)
	down := c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "down", body: stripeBody, want: 503, code: CodeProviderDown})
	requireRetryAfter(c.t, down)
	c.e.fake.SetDown(false)
	up := c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "down", body: stripeBody, want: 201})
	require.NotEmpty(c.t, up.str("checkout_url"), "the retry with the same key opens the checkout")

	const creemBody = `{"sku":"mana_1000","provider":"creem"}`
	c.e.fake.FailNext(provider.Creem, http.StatusBadRequest)
	c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "rejected", body: creemBody, want: 502, code: CodeProviderRejected})
	c.e.fake.SetProduct("prod_mana_1000", fakeapi.Product{Price: 1, Currency: "usd"})
	c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "mismatch", body: creemBody, want: 500, code: CodeCheckoutMisconfigured})
	require.Zero(c.t, c.e.fake.Created(provider.Creem), "neither refused checkout opened anything")
	c.e.fake.SetProduct("prod_mana_1000", fakeapi.Product{Price: c.e.skus["mana_1000"].Amount, Currency: "usd"})
}

func (c *conformance) requestShapeCalls(alice player) {
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "dup", body: `{"mana":1,"mana":2}`, want: 400, code: CodeInvalidRequest})
	c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "dup-co",
		body: `{"sku":"mana_1000","provider":"stripe","provider":"creem"}`, want: 400, code: CodeInvalidRequest})
	c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "text", body: `{"sku":"mana_1000","provider":"stripe"}`,
		headers: map[string]string{"Content-Type": "text/plain"}, want: 415, code: CodeUnsupportedMediaType, docInvalid: true})
	c.do(call{as: alice, method: "GET", path: "/v1/wallets", headers: map[string]string{"X-Big": strings.Repeat("b", 100<<10)},
		want: 431, code: CodeHeadersTooLarge})
	require.Zero(c.t, c.e.count(`SELECT count(*) FROM wallet_transactions`), "no refused request moved money")
}

// refundCalls pays an order, refunds part of it, spends the rest (Mana to
// Sparks, Sparks on a Marquee's day), then refunds the rest: the clawback
// exceeds both wallets, and the player's conversion is refused as
// outstanding_debt.
func (c *conformance) refundCalls(alice player) {
	id, pi := c.paidOrder(alice, "refund")
	c.deliver(providerevents.ReversalEvent("stripe", c.eventID("r1"), pi, "ch_refund", fulfillment.ReversalRefund, "succeeded", 333, "usd"))
	partial := c.waitOrder(alice, id, "partially_refunded")
	require.EqualValues(c.t, 333, partial.body["refunded_amount"])
	require.EqualValues(c.t, 334, partial.body["clawed_back_mana"]) // ceil(1000 x 333 / 999)
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "spend", body: `{"mana":600}`, want: 201})
	m := c.do(call{as: alice, method: "POST", path: "/v1/marquees", key: "mq", body: `{"name":"box","plan":"daily600"}`, want: 201})
	fund := c.do(call{as: alice, method: "POST", path: "/v1/marquees/" + m.str("id") + "/fund", key: "fund", want: 202})
	c.waitSucceeded(alice, fund.str("request_id"))
	c.deliver(providerevents.ReversalEvent("stripe", c.eventID("r2"), pi, "ch_refund", fulfillment.ReversalRefund, "succeeded", 999, "usd"))
	full := c.waitOrder(alice, id, "refunded")
	require.EqualValues(c.t, 999, full.body["refunded_amount"])
	require.EqualValues(c.t, 1000, full.body["clawed_back_mana"])
	owes := c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "owes", body: `{"mana":1}`, want: 409, code: CodeOutstandingDebt})
	require.Contains(c.t, owes.str("detail"), "owes 600 Mana")
	w := c.do(call{as: alice, method: "GET", path: "/v1/wallets", want: 200})
	require.EqualValues(c.t, map[string]any{"balance": 0.0}, w.body["mana"])
	require.EqualValues(c.t, map[string]any{"balance": 0.0}, w.body["sparks"])
}

// disputeCalls pays a second order and opens a dispute on it.
func (c *conformance) disputeCalls(alice player) {
	id, pi := c.paidOrder(alice, "dispute")
	c.deliver(providerevents.ReversalEvent("stripe", c.eventID("d1"), pi, "dp_1", fulfillment.ReversalDispute, fulfillment.StateOpen, 999, "usd"))
	c.waitOrder(alice, id, "disputed")
}

// TestOpenAPIConformanceOrderPayments: an order charged twice (the second
// payment's automatic refund refused by Stripe, so it stays unapplied),
// its first payment partly refunded and disputed, answers GET
// /v1/orders/{id} with both payments, their statuses and their facts, as
// the document says; another player gets 404.
func TestOpenAPIConformanceOrderPayments(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(s *setup) {
		s.providers[provider.Stripe].WebhookSecrets = []string{conformanceStripeSecret}
	})
	e.startWorker()
	c := newConformance(t, e)
	alice, bob := e.newPlayer("alice"), e.newPlayer("bob")
	id, pi := c.paidOrder(alice, "twice")
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	c.e.fake.FailRequests(http.StatusBadRequest) // the next request to the provider: the second payment's refund
	c.deliver(providerevents.PaymentEvent("stripe", c.eventID("twice-2"), "pi_second_"+id, n, 999, "usd"))
	c.deliver(providerevents.ReversalEvent("stripe", c.eventID("twice-r"), pi, "ch_twice", fulfillment.ReversalRefund,
		fulfillment.StateSucceeded, 333, "usd"))
	c.deliver(providerevents.ReversalEvent("stripe", c.eventID("twice-d"), pi, "dp_twice", fulfillment.ReversalDispute,
		fulfillment.StateOpen, 100, "usd"))
	var got reply
	c.poll("both payments and both facts of order "+id, func() bool {
		got = c.do(call{as: alice, method: "GET", path: "/v1/orders/" + id, want: 200})
		ps, _ := got.body["payments"].([]any)
		return len(ps) == 2 && len(ps[0].(map[string]any)["reversals"].([]any)) == 2
	})
	require.Equal(t, "disputed", got.str("status"))
	ps := got.body["payments"].([]any)
	first, second := ps[0].(map[string]any), ps[1].(map[string]any)
	require.Equal(t, stripeevents.OrderSessionID(id), first["payment_id"])
	require.Equal(t, "partially_refunded", first["status"])
	require.EqualValues(t, 333, first["refunded_amount"])
	require.EqualValues(t, 1000, first["mana"])
	// The two facts' jobs may run in either order (or decide both in one
	// transaction): take each by its id.
	facts := map[string]map[string]any{}
	for _, f := range first["reversals"].([]any) {
		facts[f.(map[string]any)["id"].(string)] = f.(map[string]any)
	}
	refund := facts["charge:ch_twice"]
	require.Equal(t, map[string]any{"id": "charge:ch_twice", "kind": "refund", "state": "succeeded", "amount": 333.0,
		"currency": "usd", "created_at": refund["created_at"], "updated_at": refund["updated_at"]}, refund)
	require.Equal(t, "open", facts["dp_twice"]["state"])
	require.Equal(t, "dispute", facts["dp_twice"]["kind"])
	require.Equal(t, "unapplied", second["status"], "charged twice: the second payment minted nothing")
	require.EqualValues(t, 0, second["mana"])
	require.EqualValues(t, 999, second["amount"])
	require.Empty(t, second["reversals"])
	c.do(call{as: bob, method: "GET", path: "/v1/orders/" + id, want: 404, code: CodeNotFound})
	c.do(call{as: bob, method: "HEAD", path: "/v1/orders/" + id, want: 404})
	e.requireAuditClean()
}

// paidOrder opens a Stripe checkout for p and delivers its signed payment.
func (c *conformance) paidOrder(p player, key string) (id, paymentID string) {
	o := c.do(call{as: p, method: "POST", path: "/v1/checkouts", key: "paid-" + key, body: `{"sku":"mana_1000","provider":"stripe"}`, want: 201})
	id = o.str("id")
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(c.t, err)
	c.deliver(providerevents.CompletedEvent("stripe", c.eventID("paid-"+key), n, 999, "usd"))
	c.waitOrder(p, id, "fulfilled")
	return id, providerevents.OrderPaymentID("stripe", id)
}

func (c *conformance) eventID(name string) string {
	return fmt.Sprintf("evt_%s_%d", name, time.Now().UnixNano())
}

// deliver posts a signed Stripe event, checked against the document.
func (c *conformance) deliver(body []byte) {
	c.t.Helper()
	require.NotNil(c.t, body)
	h, v, err := providerevents.Sign("stripe", conformanceStripeSecret, body, time.Now())
	require.NoError(c.t, err)
	r := c.do(call{method: "POST", path: "/webhooks/stripe", body: string(body), headers: map[string]string{h: v}, want: 200})
	require.Equal(c.t, "claimed", r.str("status"))
}

func (c *conformance) waitOrder(p player, id, status string) reply {
	c.t.Helper()
	var last reply
	c.poll("order "+id+" is "+status, func() bool {
		last = c.do(call{as: p, method: "GET", path: "/v1/orders/" + id, want: 200})
		return last.str("status") == status
	})
	return last
}

func requireRetryAfter(t *testing.T, r reply) {
	t.Helper()
	wait, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
	require.GreaterOrEqual(t, wait, 1)
}

// TestOpenAPIConformanceTimeout: a mutation whose handler outlives its
// deadline (here: the wallet row held by another transaction) answers the
// documented 503 timeout with Retry-After, moves nothing, and the retry
// with the same Idempotency-Key then runs, once.
func TestOpenAPIConformanceTimeout(t *testing.T) {
	t.Parallel()
	// The first request times out on a row lock held below, whatever the
	// bound; the bound must only be generous enough for the requests after
	// the lock is released to finish on a machine at load 30 (a 300 ms
	// bound failed there), so it is 5 s and the test waits it out once.
	e := newEnvWith(t, nil, func(o *Options) { o.HandlerTimeout = 5 * time.Second })
	c := newConformance(t, e)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 10)
	ctx := context.Background()
	hold, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback(ctx) }) // a failure below must not leave the pool waiting for it
	_, err = hold.Exec(ctx, `SELECT 1 FROM wallets WHERE player_id = $1 AND currency = 'mana' FOR UPDATE`, alice.id)
	require.NoError(t, err)
	slow := c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "slow", body: `{"mana":4}`,
		want: 503, code: CodeTimeout})
	requireRetryAfter(t, slow)
	require.NoError(t, hold.Rollback(ctx))
	require.Zero(t, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`), "the timed-out request moved nothing")
	done := c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "slow", body: `{"mana":4}`, want: 201})
	again := c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "slow", body: `{"mana":4}`, want: 201})
	require.True(t, again.replayed())
	require.Equal(t, done.raw, again.raw, "the first run's answer, replayed")
	require.Equal(t, 2, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`), "one conversion: two legs")
	e.requireAuditClean()
}

// TestOpenAPIConformanceRateLimited: a player over the limit gets the
// documented 429 with Retry-After, on a read and on a mutation.
func TestOpenAPIConformanceRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(s *setup) { s.RateLimit = RateLimit{PerSecond: 1, Burst: 2} })
	c := newConformance(t, e)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 10)
	c.do(call{as: alice, method: "GET", path: "/v1/wallets", want: 200})
	c.do(call{as: alice, method: "GET", path: "/v1/wallets", want: 200})
	requireRetryAfter(t, c.do(call{as: alice, method: "GET", path: "/v1/wallets", want: 429, code: CodeRateLimited}))
	requireRetryAfter(t, c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "limited", body: `{"mana":1}`,
		want: 429, code: CodeRateLimited}))
	require.Zero(t, e.count(`SELECT count(*) FROM idempotency_keys`), "a refused request claims nothing")
}

// operationalCodes are codes only the operational routes answer (the
// River UI's guard, /healthz), which are not part of the API contract.
var operationalCodes = []string{CodeCrossSiteRequest, CodeJSONRequired, "database_unreachable"}

// TestOpenAPIListsEveryErrorCode reads the packages whose problems reach
// the API (this one, webhook intake, the idempotency middleware, package
// problem, and every package that declares its errors' answers with
// errcode) and checks that every code they can write is in the document's
// ErrorCode enum: the Code* constants, the codes passed to problem.Write,
// the codes of errcode.Answer literals, and the codes assigned or returned
// next to a status.
func TestOpenAPIListsEveryErrorCode(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t, "http://127.0.0.1")
	var documented []string
	for _, v := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		documented = append(documented, v.(string))
	}
	codes := map[string]string{}
	for _, dir := range answeringDirs(t) {
		emittedCodes(t, dir, codes)
	}
	require.Contains(t, codes, CodeOutstandingDebt, "the source walk found too little")
	require.Contains(t, codes, "bad_signature", "the source walk found too little")
	for _, c := range exportedErrors {
		require.Contains(t, codes, c.want.code, "the source walk missed %s's code", c.name)
	}
	for code, where := range codes {
		if slices.Contains(operationalCodes, code) {
			continue
		}
		require.Contains(t, documented, code, "code %q (%s) is not in api/openapi.yaml's ErrorCode enum", code, where)
	}
}

// answeringDirs are the directories whose code can write a problem: the
// web packages that write them, package errcode (its shared answers) and
// every directory of the service with a non-test file that imports errcode
// (the domains declaring their errors' answers).
func answeringDirs(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	dirs := []string{".", "../../payments/webhook", "../idempotency", "../problem", "../../platform/errcode"}
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "lab") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || seen[filepath.Dir(path)] {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if imp.Path.Value == `"github.com/fibe-dev/billing/internal/platform/errcode"` {
				seen[filepath.Dir(path)] = true
				dirs = append(dirs, filepath.Dir(path))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(seen), 8, "the walk found the packages that declare answers")
	return dirs
}

// emittedCodes adds to out the error codes written in dir's non-test Go
// files, each with where it was found.
func emittedCodes(t *testing.T, dir string, out map[string]string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		consts := codeConsts(f)
		ast.Inspect(f, func(n ast.Node) bool {
			for _, lit := range codeLiterals(n, consts) {
				out[lit] = fset.Position(n.Pos()).String()
			}
			return true
		})
	}
}

// codeConsts are f's string constants named Code*.
func codeConsts(f *ast.File) map[string]string {
	consts := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, id := range spec.Names {
			if strings.HasPrefix(id.Name, "Code") && i < len(spec.Values) {
				if s, ok := stringLit(spec.Values[i]); ok {
					consts[id.Name] = s
				}
			}
		}
		return true
	})
	return consts
}

// codeLiterals are the codes node n writes: a Code* constant's value, the
// code argument of problem.Write, a literal assigned to code, the Code
// field of an errcode.Answer (or any literal's code field).
func codeLiterals(n ast.Node, consts map[string]string) []string {
	var exprs []ast.Expr
	switch n := n.(type) {
	case *ast.ValueSpec:
		for _, id := range n.Names {
			if v, ok := consts[id.Name]; ok {
				return append([]string(nil), v)
			}
		}
	case *ast.CallExpr:
		if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Write" && len(n.Args) == 4 {
			exprs = append(exprs, n.Args[2])
		}
	case *ast.AssignStmt:
		for i, lhs := range n.Lhs {
			if id, ok := lhs.(*ast.Ident); ok && id.Name == "code" && len(n.Rhs) == len(n.Lhs) {
				exprs = append(exprs, n.Rhs[i])
			}
		}
	case *ast.KeyValueExpr:
		if id, ok := n.Key.(*ast.Ident); ok && (id.Name == "code" || id.Name == "Code") {
			exprs = append(exprs, n.Value)
		}
	}
	var out []string
	for _, e := range exprs {
		if s, ok := stringLit(e); ok {
			out = append(out, s)
		} else if id, ok := e.(*ast.Ident); ok && consts[id.Name] != "" {
			out = append(out, consts[id.Name])
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
