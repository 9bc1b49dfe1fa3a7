package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// Every route, tried by alice on bob's things: ids of another player answer
// 404 exactly like ids that do not exist, and nothing of bob's is read or
// changed. The table must name every route the API serves.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice, bob := e.newPlayer("alice"), e.newPlayer("bob")
	e.credit(alice, wallet.Mana, 500)
	e.fundedMarquee(alice)
	bobMarquee, bobTx, ids := bobsResources(t, e, bob)
	type check func(t *testing.T, r reply)
	notFound := func(t *testing.T, r reply) { requireProblem(t, r, http.StatusNotFound, CodeNotFound) }
	cases := []struct {
		route, method, path, body string
		check                     check
	}{
		{"GET /v1/orders/{id}", "GET", "/v1/orders/{order}", "", notFound},
		{"GET /v1/marquees/{id}", "GET", "/v1/marquees/{marquee}", "", notFound},
		{"POST /v1/marquees/{id}/fund", "POST", "/v1/marquees/{marquee}/fund", "", notFound},
		{"POST /v1/marquees/{id}/playgrounds", "POST", "/v1/marquees/{marquee}/playgrounds", "", notFound},
		{"GET /v1/playgrounds/{id}", "GET", "/v1/playgrounds/{playground}", "", notFound},
		{"POST /v1/playgrounds/{id}/restart", "POST", "/v1/playgrounds/{playground}/restart", "", notFound},
		{"POST /v1/playgrounds/{id}/sync", "POST", "/v1/playgrounds/{playground}/sync", "", notFound},
		{"GET /v1/requests/{id}", "GET", "/v1/requests/{request}", "", notFound},
		{"GET /v1/wallets", "GET", "/v1/wallets", "", func(t *testing.T, r reply) {
			require.JSONEq(t, `{"mana":{"balance":500},"sparks":{"balance":900}}`, string(r.raw))
		}},
		{"GET /v1/wallets/{currency}/transactions", "GET", "/v1/wallets/mana/transactions", "", func(t *testing.T, r reply) {
			require.Equal(t, http.StatusOK, r.status)
			require.NotContains(t, string(r.raw), `"`+bobTx+`"`)
			require.Len(t, r.body["data"], 1)
		}},
		{"GET /v1/marquees", "GET", "/v1/marquees", "", func(t *testing.T, r reply) {
			require.Len(t, r.body["data"], 1)
			require.NotContains(t, string(r.raw), `"id":"`+idStr(bobMarquee)+`"`)
		}},
		{"POST /v1/conversions", "POST", "/v1/conversions", `{"mana":1}`, func(t *testing.T, r reply) {
			require.Equal(t, http.StatusCreated, r.status)
		}},
		{"POST /v1/checkouts", "POST", "/v1/checkouts", `{"sku":"mana_1000","provider":"stripe"}`, func(t *testing.T, r reply) {
			require.Equal(t, http.StatusCreated, r.status)
			notFound(t, e.do(bob, http.MethodGet, "/v1/orders/"+r.str("id"), "", ""))
		}},
		{"POST /v1/marquees", "POST", "/v1/marquees", `{"name":"a2","plan":"standard"}`, func(t *testing.T, r reply) {
			require.Equal(t, http.StatusCreated, r.status)
			notFound(t, e.do(bob, http.MethodGet, "/v1/marquees/"+r.str("id"), "", ""))
		}},
	}
	var tested []string
	for _, tc := range cases {
		tested = append(tested, tc.route)
	}
	requireEveryRoute(t, tested)

	snapshot := func() []int {
		return []int{
			e.count(`SELECT count(*) FROM river_job`), e.count(`SELECT count(*) FROM api_requests`),
			e.count(`SELECT count(*) FROM playgrounds`), e.count(`SELECT count(*) FROM wallet_transactions WHERE player_id = $1`, bob.id),
		}
	}
	before := snapshot()
	for _, tc := range cases {
		t.Run(tc.route, func(t *testing.T) {
			path := tc.path
			for k, v := range ids {
				path = strings.ReplaceAll(path, k, v)
			}
			// Where bob used a key, alice sends the same one: keys are
			// per player, so bob's stored answer is not replayed to her.
			key := "alice:" + tc.route
			if tc.route == "POST /v1/marquees/{id}/playgrounds" {
				key = "bob-key"
			}
			tc.check(t, e.do(alice, tc.method, path, key, tc.body))
			requireMissingIDsNotFound(t, e, alice, tc.method, tc.path, tc.body)
		})
	}
	require.Equal(t, before, snapshot(), "no job, request, playground or bob transaction was made for alice's attempts")
	require.JSONEq(t, `{"mana":{"balance":6993},"sparks":{"balance":907}}`,
		string(e.do(bob, http.MethodGet, "/v1/wallets", "", "").raw))
	e.requireAuditClean()
}

// requireEveryRoute: tested names every route of the API.
func requireEveryRoute(t *testing.T, tested []string) {
	t.Helper()
	var covered []string
	for _, rt := range newAPI(Options{}).routes() {
		covered = append(covered, rt.pattern)
	}
	slices.Sort(covered)
	slices.Sort(tested)
	require.Equal(t, covered, tested, "every route is in the table")
}

// requireMissingIDsNotFound: with an id that names nothing (or is not an
// id) in place of path's first {placeholder}, p's request is a 404.
func requireMissingIDsNotFound(t *testing.T, e *env, p player, method, path, body string) {
	t.Helper()
	if !strings.Contains(path, "{") {
		return
	}
	for _, missing := range []string{"999999999", "abc", "0", "-1"} {
		q := path[:strings.Index(path, "{")] + missing + path[strings.Index(path, "}")+1:]
		requireProblem(t, e.do(p, method, q, "", body), http.StatusNotFound, CodeNotFound)
	}
}

// bobsResources gives bob 7000 Mana, a funded Marquee (1000 Sparks - 100)
// with a playground, an order and a conversion of 7 Mana. It returns the
// Marquee, the conversion's Mana debit and the ids of what bob owns, by
// the placeholder TestTenantIsolation's paths name them with.
func bobsResources(t *testing.T, e *env, bob player) (marquee int64, tx string, ids map[string]string) {
	t.Helper()
	e.credit(bob, wallet.Mana, 7000)
	marquee = e.fundedMarquee(bob)
	pg := e.do(bob, http.MethodPost, "/v1/marquees/"+idStr(marquee)+"/playgrounds", "bob-key", "")
	require.Equal(t, http.StatusAccepted, pg.status)
	order := e.do(bob, http.MethodPost, "/v1/checkouts", "", `{"sku":"mana_1000","provider":"stripe"}`)
	require.Equal(t, http.StatusCreated, order.status)
	conv := e.do(bob, http.MethodPost, "/v1/conversions", "", `{"mana":7}`)
	require.Equal(t, http.StatusCreated, conv.status)
	tx = conv.body["mana_debit"].(map[string]any)["id"].(string)
	return marquee, tx, map[string]string{
		"{marquee}": idStr(marquee), "{playground}": pg.str("playground_id"),
		"{order}": order.str("id"), "{request}": pg.str("request_id"),
	}
}
