package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	for name, p := range map[string]player{
		"missing":   {},
		"unknown":   {key: "bk_" + strings.Repeat("0", 64)},
		"malformed": {key: "not-a-key"},
	} {
		r := e.do(p, http.MethodGet, "/v1/wallets", "", "")
		requireProblem(t, r, http.StatusUnauthorized, CodeUnauthorized)
		require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer", name)
		r = e.do(p, http.MethodPost, "/v1/conversions", "k", `{"mana":1}`)
		requireProblem(t, r, http.StatusUnauthorized, CodeUnauthorized)
	}
	r := e.do(alice, http.MethodGet, "/v1/wallets", "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.NotEmpty(t, r.header.Get("X-Request-Id"))
	require.Equal(t, 0, e.count(`SELECT count(*) FROM idempotency_keys`))
}

func TestWalletsConversionsAndTransactions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 1000)

	r := e.do(alice, http.MethodPost, "/v1/conversions", "conv-1", `{"mana":300}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.raw))
	debit := r.body["mana_debit"].(map[string]any)
	credit := r.body["sparks_credit"].(map[string]any)
	require.EqualValues(t, -300, debit["amount"])
	require.EqualValues(t, 700, debit["balance_after"])
	require.EqualValues(t, 300, credit["amount"])
	require.IsType(t, "", debit["id"], "ids are strings")

	r = e.do(alice, http.MethodGet, "/v1/wallets", "", "")
	require.JSONEq(t, `{"mana":{"balance":700},"sparks":{"balance":300}}`, string(r.raw))

	for i := range 3 {
		require.Equal(t, http.StatusCreated, e.do(alice, http.MethodPost, "/v1/conversions", "", fmt.Sprintf(`{"mana":%d}`, i+1)).status)
	}
	// Mana: one credit and four debits, newest first, two per page.
	var ids []string
	before := ""
	for page := 0; ; page++ {
		path := "/v1/wallets/mana/transactions?limit=2"
		if before != "" {
			path += "&before=" + before
		}
		r = e.do(alice, http.MethodGet, path, "", "")
		require.Equal(t, http.StatusOK, r.status, string(r.raw))
		for _, tx := range r.body["data"].([]any) {
			ids = append(ids, tx.(map[string]any)["id"].(string))
		}
		if r.body["has_more"] != true {
			break
		}
		before = r.str("next_before")
	}
	require.Len(t, ids, 5)
	requireProblem(t, e.do(alice, http.MethodGet, "/v1/wallets/gold/transactions", "", ""), http.StatusNotFound, CodeNotFound)
	requireProblem(t, e.do(alice, http.MethodGet, "/v1/wallets/mana/transactions?limit=0", "", ""), http.StatusBadRequest, CodeInvalidRequest)
	e.requireAuditClean()
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 100)
	for _, tc := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/conversions", `{"mana":0}`, 400, CodeInvalidAmount},
		{"/v1/conversions", `{"mana":-5}`, 400, CodeInvalidAmount},
		{"/v1/conversions", `{}`, 400, CodeInvalidAmount},
		{"/v1/conversions", `{"mana":1.5}`, 400, CodeInvalidAmount},
		{"/v1/conversions", `{"mana":"5"}`, 400, CodeInvalidAmount},
		{"/v1/conversions", `{"mana":9223372036854775808}`, 400, CodeInvalidAmount},
		{"/v1/conversions", `{"mana":1e30}`, 400, CodeInvalidAmount},
		{"/v1/conversions", `{"mana":5,"sparks":5}`, 400, CodeInvalidRequest},
		{"/v1/conversions", `{"mana":5} {"mana":5}`, 400, CodeInvalidRequest},
		{"/v1/conversions", `not json`, 400, CodeInvalidRequest},
		{"/v1/conversions", `{"mana":101}`, 409, CodeInsufficientBalance},
		{"/v1/conversions", `{"mana":"` + strings.Repeat("9", 70<<10) + `"}`, 413, CodeBodyTooLarge},
		{"/v1/checkouts", `{"sku":"nope","provider":"stripe"}`, 400, "unknown_sku"},
		{"/v1/checkouts", `{"sku":"mana_1000","provider":"paypal"}`, 400, "unknown_provider"},
		{"/v1/checkouts", `{"sku":"mana_1000","provider":"stripe","price":1}`, 400, CodeInvalidRequest},
		{"/v1/marquees", `{"name":"m","plan":"gold"}`, 400, "unknown_plan"},
		{"/v1/marquees", `{"name":"","plan":"standard"}`, 400, "invalid_name"},
		{"/v1/marquees/1/fund", `{"now":true}`, 400, CodeInvalidRequest},
	} {
		t.Run(tc.path+" "+tc.body[:min(len(tc.body), 40)], func(t *testing.T) {
			requireProblem(t, e.do(alice, http.MethodPost, tc.path, "", tc.body), tc.status, tc.code)
		})
	}
	requireProblem(t, e.do(alice, http.MethodPost, "/v1/conversions", strings.Repeat("k", 256), `{"mana":1}`),
		http.StatusBadRequest, CodeIdempotencyKeyInvalid)
	r := e.do(alice, http.MethodGet, "/v1/wallets", "", "")
	require.JSONEq(t, `{"mana":{"balance":100},"sparks":{"balance":0}}`, string(r.raw), "nothing moved")
	e.requireAuditClean()
}

// With SparksPerMana > 1 a conversion whose Sparks leg overflows is a 400.
func TestConversionOverflowIs400(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(s *setup) { s.sparksPerMana = 1 << 40 })
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 1<<30)
	requireProblem(t, e.do(alice, http.MethodPost, "/v1/conversions", "", `{"mana":16777216}`), http.StatusBadRequest, CodeInvalidAmount)
	e.requireAuditClean()
}

// raceSame sends n identical POSTs with one key at once.
func raceSame(e *env, p player, n int, path, key, body string) []reply {
	out := make([]reply, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = e.do(p, http.MethodPost, path, key, body)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// requireOneEffect checks that exactly one answer ran and the others are
// replays of it or 409 in_use.
func requireOneEffect(t *testing.T, replies []reply, want int) {
	t.Helper()
	var first []byte
	fresh := 0
	for _, r := range replies {
		switch {
		case r.status == want && !r.replayed():
			fresh++
			first = r.raw
		case r.status == want:
		case r.status == http.StatusConflict && r.str("code") == CodeIdempotencyKeyInUse:
		default:
			t.Fatalf("unexpected answer %d %s", r.status, r.raw)
		}
	}
	require.Equal(t, 1, fresh)
	for _, r := range replies {
		if r.status == want {
			require.JSONEq(t, string(first), string(r.raw))
		}
	}
}

func TestConcurrentIdenticalPOSTsHaveOneEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 1000)
	marquee := e.fundedMarquee(alice)
	ctx := context.Background()
	for _, tc := range []struct {
		path, body string
		status     int
		effects    string
		want       int
	}{
		{"/v1/conversions", `{"mana":10}`, http.StatusCreated, `SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`, 2},
		{"/v1/checkouts", `{"sku":"mana_1000","provider":"stripe"}`, http.StatusCreated, `SELECT count(*) FROM orders`, 1},
		{"/v1/marquees", `{"name":"web","plan":"standard"}`, http.StatusCreated, `SELECT count(*) FROM marquees`, 2},
		{"/v1/marquees/" + idStr(marquee) + "/playgrounds", `{"name":"pg"}`, http.StatusAccepted, `SELECT count(*) FROM playgrounds`, 1},
		{"/v1/marquees/" + idStr(marquee) + "/fund", ``, http.StatusAccepted, `SELECT count(*) FROM api_requests WHERE kind = 'fund'`, 1},
	} {
		key := "race:" + tc.path
		replies := raceSame(e, alice, 20, tc.path, key, tc.body)
		requireOneEffect(t, replies, tc.status)
		require.Equal(t, tc.want, e.count(tc.effects), tc.path)
		// Same key, another body: refused, nothing applied.
		other := `{"name":"other"}`
		if strings.Contains(tc.path, "conversions") {
			other = `{"mana":11}`
		}
		requireProblem(t, e.do(alice, http.MethodPost, tc.path, key, other), http.StatusUnprocessableEntity, CodeIdempotencyKeyReused)
		require.Equal(t, tc.want, e.count(tc.effects), tc.path)
	}
	// Every 202 recorded exactly one request row and one job.
	require.Equal(t, 2, e.count(`SELECT count(*) FROM api_requests`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM river_job WHERE kind = 'playground_create'`))
	var n int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'fund_day'`).Scan(&n))
	require.Equal(t, 1, n)
	e.requireAuditClean()
}

// TestRespelledRetriesHaveOneEffect races, per route, goroutines that
// send one request under one Idempotency-Key with its body spelled each its
// own way (member order, whitespace, escapes), as clients and proxies that
// re-serialize JSON do: exactly one effect, every other answer a replay of
// it (or 409 in use while it runs); then the full audit.
func TestRespelledRetriesHaveOneEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 1000)
	for _, tc := range []struct {
		path      string
		spellings []string
		status    int
		effects   string
		want      int
	}{
		{"/v1/conversions", []string{`{"mana":7}`, `{"mana": 7}`, "{\n  \"mana\": 7\n}", `{ "m\u0061na" :7 }`},
			http.StatusCreated, `SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`, 2},
		{"/v1/marquees", []string{`{"name":"web","plan":"standard"}`, `{"plan":"standard","name":"web"}`,
			`{ "plan" : "standard" , "name" : "w\u0065b" }`}, http.StatusCreated, `SELECT count(*) FROM marquees`, 1},
		{"/v1/checkouts", []string{`{"sku":"mana_1000","provider":"stripe"}`, `{"provider":"stripe","sku":"mana_1000"}`},
			http.StatusCreated, `SELECT count(*) FROM orders`, 1},
	} {
		key := "respelled:" + tc.path
		const n = 24
		replies := make([]reply, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				replies[i] = e.do(alice, http.MethodPost, tc.path, key, tc.spellings[i%len(tc.spellings)])
			}()
		}
		close(start)
		wg.Wait()
		requireOneEffect(t, replies, tc.status)
		require.Equal(t, tc.want, e.count(tc.effects), tc.path)
		for _, body := range tc.spellings {
			r := e.do(alice, http.MethodPost, tc.path, key, body)
			require.Equal(t, tc.status, r.status, body)
			require.True(t, r.replayed(), "%s %s is the same request", tc.path, body)
		}
	}
	e.requireAuditClean()
}

func TestCheckoutsOrdersAndMarquees(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	r := e.do(alice, http.MethodPost, "/v1/checkouts", "", `{"sku":"mana_5000","provider":"paddle"}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.raw))
	require.Equal(t, "mana_5000", r.str("sku"))
	require.EqualValues(t, 3999, r.body["amount"])
	require.Equal(t, "usd", r.str("currency"))
	require.EqualValues(t, 5000, r.body["mana"])
	require.Equal(t, "pending", r.str("status"))
	got := e.do(alice, http.MethodGet, "/v1/orders/"+r.str("id"), "", "")
	require.Equal(t, http.StatusOK, got.status)
	created := r.body
	created["payments"] = []any{} // GET lists the order's payments: none yet
	require.Equal(t, created, got.body)

	m := e.do(alice, http.MethodPost, "/v1/marquees", "", `{"name":"box","plan":"standard"}`)
	require.Equal(t, http.StatusCreated, m.status, string(m.raw))
	require.Equal(t, false, m.body["funded"])
	require.Nil(t, m.body["paid_through"])
	require.EqualValues(t, 100, m.body["daily_price"])
	require.Equal(t, "/v1/marquees/"+m.str("id"), m.header.Get("Location"))
	list := e.do(alice, http.MethodGet, "/v1/marquees", "", "")
	require.Len(t, list.body["data"], 1)

	e.credit(alice, wallet.Sparks, 100)
	e.fundNow(mustID(t, m.str("id")))
	got = e.do(alice, http.MethodGet, "/v1/marquees/"+m.str("id"), "", "")
	require.Equal(t, true, got.body["funded"])
	require.Equal(t, "funded", got.str("status"))
	require.NotNil(t, got.body["paid_through"])
	e.requireAuditClean()
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	var id int64
	_, err := fmt.Sscan(s, &id)
	require.NoError(t, err)
	return id
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 10)
	before := counterValue(t, "POST /v1/conversions", "201")
	require.Equal(t, http.StatusCreated, e.do(alice, http.MethodPost, "/v1/conversions", "m1", `{"mana":1}`).status)
	require.True(t, e.do(alice, http.MethodPost, "/v1/conversions", "m1", `{"mana":1}`).replayed())
	require.GreaterOrEqual(t, counterValue(t, "POST /v1/conversions", "201")-before, 2.0)
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	outcomes := map[string]bool{}
	for _, f := range families {
		if f.GetName() == "billing_idempotency_requests_total" {
			for _, m := range f.GetMetric() {
				outcomes[m.GetLabel()[0].GetValue()] = true
			}
		}
	}
	require.True(t, outcomes["miss"] && outcomes["replay"], "%v", outcomes)
}

func counterValue(t *testing.T, route, code string) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, httpRequests.WithLabelValues(route, code).Write(&m))
	return m.GetCounter().GetValue()
}

// TestUnmatchedRoutesAnswerProblems: a path no route serves and a method a
// route does not take are answered in the API's one error format.
func TestUnmatchedRoutesAnswerProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	r := e.do(alice, http.MethodGet, "/v1/no-such-thing", "", "")
	requireProblem(t, r, http.StatusNotFound, CodeNotFound)
	r = e.do(alice, http.MethodDelete, "/v1/wallets", "", "")
	requireProblem(t, r, http.StatusMethodNotAllowed, CodeMethodNotAllowed)
	require.Contains(t, r.header.Get("Allow"), http.MethodGet)
	r = e.do(player{}, http.MethodGet, "/nowhere", "", "")
	requireProblem(t, r, http.StatusNotFound, CodeNotFound)
	r = e.do(alice, http.MethodGet, "/healthz", "", "")
	require.Equal(t, http.StatusOK, r.status, "matched routes are untouched")
}

// TestServerErrorAdviceFitsTheRequest: a 500's detail says how to retry
// that request: a read is retried as it is, a mutation with its
// Idempotency-Key (or with one, when it carried none). The 500s come from
// real handlers missing their River client.
func TestServerErrorAdviceFitsTheRequest(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, nil, func(o *Options) { o.River = nil })
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Sparks, 1000)
	m := e.do(alice, http.MethodPost, "/v1/marquees", "", `{"name":"box","plan":"standard"}`)
	require.Equal(t, http.StatusCreated, m.status, string(m.raw))
	var req int64
	require.NoError(t, e.pool.QueryRow(context.Background(), `INSERT INTO api_requests (player_id, kind, target, job_id, created_at)
		VALUES ($1, 'fund', 'marquee:1', 1, now()) RETURNING id`, alice.id).Scan(&req))

	get := e.do(alice, http.MethodGet, "/v1/requests/"+idStr(req), "", "")
	requireProblem(t, get, http.StatusInternalServerError, CodeInternal)
	require.Equal(t, "internal error; retry", get.str("detail"))
	require.NotContains(t, get.str("detail"), "Idempotency-Key", "a GET has no key to retry with")

	fund := "/v1/marquees/" + m.str("id") + "/fund"
	keyed := e.do(alice, http.MethodPost, fund, "advice-1", "")
	requireProblem(t, keyed, http.StatusInternalServerError, CodeInternal)
	require.Equal(t, "internal error; retry with the same Idempotency-Key", keyed.str("detail"))
	bare := e.do(alice, http.MethodPost, fund, "", "")
	requireProblem(t, bare, http.StatusInternalServerError, CodeInternal)
	require.Contains(t, bare.str("detail"), "retry with an Idempotency-Key")
}

// TestErrorDetailsAreTheAPIsOwn: the details of refused bodies and names
// say what is wrong and where, without a Go package or type.
func TestErrorDetailsAreTheAPIsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	for body, want := range map[string]string{
		`{"mana":1,"x":2}`:    "invalid JSON body: unknown member at /x (names are case-sensitive)",
		`{"mana":1,"mana":2}`: "invalid JSON body: duplicate member name at /mana",
		`{"mana":`:            "invalid JSON body: unexpected EOF at /mana after byte 8",
		`[1]`:                 "invalid JSON body: want an object, got an array",
		`{"mana":1} {}`:       "invalid JSON body: data after the JSON value",
		`{"mana":"5"}`:        "mana must be an integer that fits in 64 bits",
	} {
		r := e.do(alice, http.MethodPost, "/v1/conversions", "", body)
		require.Equal(t, http.StatusBadRequest, r.status, body)
		require.Equal(t, want, r.str("detail"), body)
	}
	r := e.do(alice, http.MethodPost, "/v1/checkouts", "", `{"sku":1,"provider":"stripe"}`)
	require.Equal(t, "invalid JSON body: want a string at /sku, got a number", r.str("detail"))
	r = e.do(alice, http.MethodPost, "/v1/marquees", "", `{"name":"","plan":"standard"}`)
	requireProblem(t, r, http.StatusBadRequest, "invalid_name")
	require.Equal(t, "a Marquee's name must be 1 to 100 printable characters", r.str("detail"))
}
