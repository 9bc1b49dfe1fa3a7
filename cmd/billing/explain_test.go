package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// billing explain order, payment and player print the timeline of a
// history made by the real intake and workers, as text and as JSON; an
// unknown id or a bad argument is an error that says so.
func TestExplainCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	river := fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{})
	secrets := map[string][]string{"stripe": {"whsec_cli"}}
	intakes := provider.Select[webhook.Intake](drivers.New(map[string]provider.Options{
		provider.Stripe: {WebhookSecrets: secrets["stripe"]}}))
	intake := httptest.NewServer(webhook.NewHandler(webhook.Options{Pool: pool, River: river, Providers: intakes,
		Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(intake.Close)
	p, _, err := players.Create(ctx, pool, "cli")
	require.NoError(t, err)
	o, err := fulfillment.CreateCheckout(ctx, pool, fulfillment.DefaultSKUs(), fulfillment.CheckoutParams{PlayerID: p.ID,
		SKU: "mana_1000", Provider: "stripe"})
	require.NoError(t, err)
	deliver := func(evt string, body []byte) {
		h, v, err := providerevents.Sign("stripe", "whsec_cli", body, time.Now())
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, intake.URL+"/webhooks/stripe", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(h, v)
		res, err := intake.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Eventually(t, func() bool {
			var n int
			_ = pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'event_id' = $1 AND finalized_at IS NOT NULL`, evt).Scan(&n)
			return n == 1
		}, waitDeadline, 20*time.Millisecond)
	}
	paid := providerevents.CompletedEvent("stripe", "evt_cli_1", o.ID, o.Amount, o.Currency)
	deliver("evt_cli_1", paid)
	deliver("evt_cli_1", paid) // a duplicate delivery, counted on the claim
	deliver("evt_cli_2", providerevents.PaymentEvent("stripe", "evt_cli_2", "pi_cli_second", o.ID, o.Amount, o.Currency))
	order := strconv.FormatInt(o.ID, 10)

	text := runBilling(t, env, "explain", "order", order)
	require.Contains(t, text, "Order "+order+"\n\nPaid twice: payment cs_test_order_"+order+" (9.99 USD) minted 1000 Mana")
	require.Contains(t, text, "is NOT refunded yet")
	require.Contains(t, text, "(needs attention)")
	require.Contains(t, text, "[UNAPPLIED] Payment cs_test_pi_cli_second of 9.99 USD recorded UNAPPLIED")
	require.Contains(t, text, `key: wallet key "order:`+order+`:fulfilment"`)
	require.Contains(t, text, "River UI: /riverui/jobs/")
	require.Contains(t, runBilling(t, env, "explain", "payment", "pi_cli_second"), "Payment stripe pi_cli_second\n\nPaid twice",
		"the id's prefix names its provider")

	var tl timelineJSON
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, "explain", "payment", "stripe", "pi_cli_second", "--json")), &tl))
	require.Equal(t, subjectJSON{Kind: "payment", Provider: "stripe", ID: "pi_cli_second"}, tl.Subject)
	require.Equal(t, "Paid twice", tl.Headline)
	require.True(t, tl.Attention)
	require.Equal(t, []string{order}, tl.Orders)
	require.NotEmpty(t, tl.Lines)
	unapplied := tl.Lines[len(tl.Lines)-1]
	require.Equal(t, "payment_unapplied", unapplied.Type)
	require.Equal(t, "unapplied", unapplied.Flag)
	require.Equal(t, []keyJSON{{Kind: "provider payment", Value: "cs_test_pi_cli_second"}}, unapplied.Keys)
	require.Equal(t, order, strconv.FormatInt(unapplied.Refs.OrderID, 10))
	claim := tl.Lines[1]
	require.Equal(t, "delivery_claimed", claim.Type)
	require.Equal(t, []keyJSON{{Kind: "provider event id", Value: "evt_cli_1"}}, claim.Keys)
	require.Equal(t, int64(1), claim.Duplicates)
	require.NotNil(t, claim.LastDelivery)
	require.Contains(t, claim.Text, "; 1 duplicate delivery followed")
	var raw map[string]any // the documented field names
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, "explain", "order", order, "--json")), &raw))
	for _, k := range []string{"subject", "headline", "verdict", "attention", "player_id", "orders", "lines", "as_of"} {
		require.Contains(t, raw, k)
	}
	line := raw["lines"].([]any)[0].(map[string]any)
	for _, k := range []string{"at", "layer", "type", "text", "refs"} {
		require.Contains(t, line, k)
	}
	require.Equal(t, order, raw["orders"].([]any)[0], "ids are strings, as in the API")
	claimed := raw["lines"].([]any)[1].(map[string]any)
	require.Equal(t, "delivery_claimed", claimed["type"])
	require.Equal(t, 1.0, claimed["duplicate_deliveries"])
	require.Contains(t, claimed, "last_delivery_at")

	require.Contains(t, runBilling(t, env, "explain", "player", strconv.FormatInt(p.ID, 10), "--since", "1h"),
		"Player "+strconv.FormatInt(p.ID, 10)+" since ")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "order", "999999"}, "billing: timeline: not found: no order 999999"},
		{[]string{"explain", "order", "07x"}, `"07x" is not an order id`},
		{[]string{"explain", "payment", "stripe", "pi_nobody"}, `no stripe payment, refund, dispute, event or checkout is known as "pi_nobody"`},
		{[]string{"explain", "payment", "paypal", "x"}, `unknown provider "paypal"`},
		{[]string{"explain", "player", "999999"}, "no player 999999"},
		{[]string{"explain", "player", "1", "--since", "yesterday"}, `--since: "yesterday" is not a date`},
		{[]string{"explain", "payment", "stripe"}, "billing: explain payment: the id is missing after the provider; usage: billing explain payment [PROVIDER] ID"},
		{[]string{"explain", "payment"}, "billing explain payment: expected 1 or 2 arguments, got 0; usage: billing explain payment [PROVIDER] ID [--json]"},
		{[]string{"explain", "order"}, "billing explain order: expected 1 argument, got 0; usage: billing explain order ID [--json]"},
		{[]string{"explain", "payment", "ch_cli"}, `explain payment: "ch_cli" may be a stripe or creem id: name the provider`},
		{[]string{"explain", "payment", "evt_cli_1"}, `explain payment: the prefix of "evt_cli_1" names no provider: name it (stripe, paddle, creem)`},
		{[]string{"explain", "payment", "stripe", "\xff"}, "payment id must be valid UTF-8 without NUL"},
		{[]string{"explain", "payment", "pi_\xff"}, "payment id must be valid UTF-8 without NUL"},
	} {
		code, out := runBillingExit(t, env, c.args...)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, c.want)
	}
	// A provider's id holding control characters prints escaped.
	deliver("evt_cli_3", providerevents.PaymentEvent("stripe", "evt_cli_3", hostileID, o.ID, o.Amount, o.Currency))
	text = runBilling(t, env, "explain", "order", order)
	requirePrintable(t, text)
	require.Contains(t, text, `also known as pi_\x1b[2J\x1b[31mred\u009b0m\u202eevil\x7f\n`)
	requirePrintable(t, runBilling(t, env, "explain", "payment", "stripe", "evt_cli_3"))

	help := runBilling(t, env, "explain", "--help")
	for _, want := range []string{"order", "payment", "player", "River UI", "--json"} {
		require.Contains(t, help, want)
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"2026-11-01":           time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		"2026-11-30T08:00:00Z": time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC),
		"72h":                  now.Add(-72 * time.Hour),
		"30d":                  now.AddDate(0, 0, -30),
	} {
		got, err := parseSince(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %s", in, got)
	}
	for _, bad := range []string{"yesterday", "-3h", "0d", "2026-13-01"} {
		_, err := parseSince(bad, now)
		require.Error(t, err, bad)
	}
}
