package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/api"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/wallet"
)

// webhookSchemas are the request-body schemas of the document's webhooks
// (api/openapi.yaml), by event type, from a document kin-openapi loaded
// and validated.
func webhookSchemas(t *testing.T) map[string]*openapi3.Schema {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.YAML)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()), "api/openapi.yaml is not a valid OpenAPI document")
	require.True(t, doc.IsOpenAPI31OrLater())
	out := map[string]*openapi3.Schema{}
	for typ, item := range doc.Webhooks {
		require.NotNil(t, item.Post, "webhook %s has no post", typ)
		mt := item.Post.RequestBody.Value.Content.Get("application/json")
		require.NotNil(t, mt, "webhook %s has no application/json body", typ)
		out[typ] = mt.Schema.Value
	}
	require.ElementsMatch(t, events.Types, keys(out), "the document's webhooks are the catalogue")
	return out
}

// validate checks body against the schema of its type, formats included
// (date, date-time), as JSON Schema 2020-12.
func validate(schemas map[string]*openapi3.Schema, typ string, body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	s, ok := schemas[typ]
	if !ok {
		return fmt.Errorf("no webhook %s in the document", typ)
	}
	return s.VisitJSON(v, openapi3.EnableFormatValidation(), openapi3.EnableJSONSchema2020())
}

// TestEmittedBodiesMatchTheDocument makes billing emit one event of every
// type it emits today, through the real fulfilment, reversal and funding
// code, and validates every stored body against its webhook's schema. A
// body with a member removed, renamed or of the wrong type is rejected, so
// the check can fail.
func TestEmittedBodiesMatchTheDocument(t *testing.T) {
	t.Parallel()
	schemas := webhookSchemas(t)
	pool := testdb.New(t)
	emitEveryType(t, pool)

	rows, err := pool.Query(context.Background(), `SELECT type, payload::text FROM events ORDER BY player_id, sequence`)
	require.NoError(t, err)
	stored, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Type, Body string }])
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, ev := range stored {
		seen[ev.Type] = true
		require.NoError(t, validate(schemas, ev.Type, []byte(ev.Body)), "stored %s body %s", ev.Type, ev.Body)
		requireRejectsBroken(t, schemas, ev.Type, ev.Body)
	}
	for _, typ := range events.Types {
		require.True(t, seen[typ], "billing emitted no %s: drive it here", typ)
	}
}

// TestDateFormatsAreAsserted: formats are asserted: a funded day that is
// no date, or an empty paid_through, is rejected.
func TestDateFormatsAreAsserted(t *testing.T) {
	t.Parallel()
	schemas := webhookSchemas(t)
	for _, data := range []string{`{"marquee_id":1,"day":"2030-13-01","plan":"standard","sparks_debited":100,"paid_through":"2030-01-02T00:00:00Z"}`,
		`{"marquee_id":1,"day":"2030-01-01","plan":"standard","sparks_debited":100,"paid_through":""}`} {
		body := fmt.Sprintf(`{"id":%q,"type":"marquee.funded","api_version":%q,"created_at":"2026-12-01T10:00:00Z",`+
			`"player_id":7,"sequence":3,"data":%s}`, events.ID(events.MarqueeFunded, "k"), events.APIVersion, data)
		require.Error(t, validate(schemas, events.MarqueeFunded, []byte(body)), "marquee.funded data %s", data)
	}
}

// requireRejectsBroken: the schema of typ rejects body with each data
// member missing, with each of them a JSON value of the wrong type, with
// an unknown envelope member and with another type's name.
func requireRejectsBroken(t *testing.T, schemas map[string]*openapi3.Schema, typ, body string) {
	t.Helper()
	var ev map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &ev))
	data := ev["data"].(map[string]any)
	for name, v := range data {
		delete(data, name)
		require.Error(t, validate(schemas, typ, marshal(t, ev)), "%s without data.%s", typ, name)
		data[name] = []any{"wrong"}
		require.Error(t, validate(schemas, typ, marshal(t, ev)), "%s with data.%s an array", typ, name)
		data[name] = v
	}
	ev["unknown"] = 1
	require.Error(t, validate(schemas, typ, marshal(t, ev)), "%s with an unknown envelope member", typ)
	delete(ev, "unknown")
	ev["type"] = "order.refunded"
	require.Error(t, validate(schemas, typ, marshal(t, ev)), "%s named order.refunded", typ)
}

// emitEveryType drives one player through every effect billing reports:
// an order paid (order.fulfilled) and paid again (payment.unapplied, then
// payment.refunded by the automatic refund); a day funded and the next
// unfunded; a refund in another currency (reversal.refused) and one that
// finds the Mana spent (reversal.applied, debt.opened); a second order
// that settles the debt (order.fulfilled, debt.settled).
func emitEveryType(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	store := wallet.New(pool, wallet.Options{SparksPerMana: 10, Observer: events.LowBalance{Days: 3}})
	client := fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{Wallet: store,
		Refunders: map[string]fulfillment.Refunder{provider.Stripe: &refunder{}}})
	p, _, err := players.Create(ctx, pool, "schema")
	require.NoError(t, err)
	m, err := enforcer.CreateMarquee(ctx, pool, enforcer.DefaultPlans(), enforcer.CreateParams{PlayerID: p.ID, Name: "m", Plan: "standard"})
	require.NoError(t, err)
	first := order(t, pool, p.ID)
	// cs_one is applied before cs_two arrives (had they raced, either
	// could be the applied one, and the refunds below name cs_one).
	work(t, pool, client, "fulfill_order", 1,
		fulfillment.FulfillOrderArgs{OrderID: first.ID, EventID: "evt_pay", Provider: provider.Stripe, PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_one"})
	work(t, pool, client, "fulfill_order", 2,
		fulfillment.FulfillOrderArgs{OrderID: first.ID, EventID: "evt_again", Provider: provider.Stripe, PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_two"})

	_, err = store.Convert(ctx, wallet.ConvertParams{PlayerID: p.ID, Mana: 1000, IdempotencyKey: wallet.CallerKey("schema-convert")})
	require.NoError(t, err)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	funds := enforcer.New(pool, store, enforcer.Options{Now: func() time.Time { return now }, Logger: testkit.Quiet})
	res, err := funds.FundDay(ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2030-01-01"})
	require.NoError(t, err)
	require.Equal(t, enforcer.OutcomeFunded, res.Outcome)
	_, err = store.Adjust(ctx, wallet.AdjustParams{PlayerID: p.ID, Currency: wallet.Sparks, Amount: -9900, Reason: "drain", Key: "schema-drain"})
	require.NoError(t, err)
	now = now.AddDate(0, 0, 1)
	res, err = funds.FundDay(ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2030-01-02"})
	require.NoError(t, err)
	require.Equal(t, enforcer.OutcomeInsufficient, res.Outcome)

	refund := fulfillment.ReversePaymentArgs{Provider: provider.Stripe, PaymentID: "cs_one", ReversalKind: "refund", State: "succeeded", Amount: 999}
	eur, usd := refund, refund
	eur.EventID, eur.ReversalID, eur.Currency = "evt_eur", "re_eur", "eur"
	usd.EventID, usd.ReversalID, usd.Currency = "evt_usd", "re_usd", "usd"
	work(t, pool, client, "reverse_payment", 1, eur)
	work(t, pool, client, "reverse_payment", 2, usd)

	second := order(t, pool, p.ID)
	work(t, pool, client, "fulfill_order", 3, fulfillment.FulfillOrderArgs{OrderID: second.ID, EventID: "evt_settle",
		Provider: provider.Stripe, PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_three"})

	// Another player spends their Mana, is refunded into debt, and an
	// operator forgives it; then a top-up covers the first player's
	// Marquee's days again.
	q, _, err := players.Create(ctx, pool, "schema-forgiven")
	require.NoError(t, err)
	third := order(t, pool, q.ID)
	work(t, pool, client, "fulfill_order", 4, fulfillment.FulfillOrderArgs{OrderID: third.ID, EventID: "evt_q_pay",
		Provider: provider.Stripe, PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_q"})
	_, err = store.Convert(ctx, wallet.ConvertParams{PlayerID: q.ID, Mana: 1000, IdempotencyKey: wallet.CallerKey("schema-convert-q")})
	require.NoError(t, err)
	_, err = store.Adjust(ctx, wallet.AdjustParams{PlayerID: q.ID, Currency: wallet.Sparks, Amount: -10000, Reason: "spent", Key: "schema-spent-q"})
	require.NoError(t, err)
	again := usd
	again.EventID, again.ReversalID, again.PaymentID = "evt_q_refund", "re_q", "cs_q"
	work(t, pool, client, "reverse_payment", 3, again)
	f, err := fulfillment.ForgiveDebt(ctx, pool, store, q.ID, "schema-forgive", "support ticket 7")
	require.NoError(t, err)
	require.Positive(t, f.Mana, "a debt was forgiven")
	_, err = store.Adjust(ctx, wallet.AdjustParams{PlayerID: p.ID, Currency: wallet.Sparks, Amount: 100000, Reason: "top up", Key: "schema-top-up"})
	require.NoError(t, err)
}

func order(t *testing.T, pool *pgxpool.Pool, player int64) *fulfillment.Order {
	t.Helper()
	o, err := fulfillment.CreateCheckout(context.Background(), pool, testkit.Catalogue(),
		fulfillment.CheckoutParams{PlayerID: player, SKU: "mana_1000", Provider: provider.Stripe})
	require.NoError(t, err)
	return o
}

// work does what webhook intake does for each of args (claim the event,
// insert its job, in one transaction) and waits until total jobs of kind
// have ended.
func work(t *testing.T, pool *pgxpool.Pool, client *river.Client[pgx.Tx], kind string, total int, args ...river.JobArgs) {
	t.Helper()
	ctx := context.Background()
	for _, a := range args {
		var provider, id string
		switch a := a.(type) {
		case fulfillment.FulfillOrderArgs:
			provider, id = a.Provider, a.EventID
		case fulfillment.ReversePaymentArgs:
			provider, id = a.Provider, a.EventID
		}
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO webhook_events (provider, event_id, event_type, payload)
			VALUES ($1, $2, 'schema_test', '{}')`, provider, id)
		require.NoError(t, err)
		_, err = client.InsertTx(ctx, tx, a, nil)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	testkit.JobsOn(pool).Wait(t, testkit.Kind(kind), total, testkit.WaitOptions{Strict: true})
}

// refunder is a provider's refund API that refunds what it is asked.
type refunder struct{ mu sync.Mutex }

func (r *refunder) Refund(_ context.Context, req provider.RefundRequest) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "re_schema_" + req.IdempotencyKey, nil
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
