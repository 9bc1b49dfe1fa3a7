package main

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
)

// The operator's endpoint and event commands: add is idempotent on the URL
// and shows the secret once, a bad URL changes nothing, rotate-secret shows
// the new one, disable/enable, and events list/show/resend by the id.
func TestEndpointsAndEventsCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	var added struct {
		ID      int64    `json:"id"`
		Types   []string `json:"types"`
		Created bool     `json:"created"`
		Secret  string   `json:"secret"`
	}
	out := billingStdout(t, env, "endpoints", "add", "https://example.test/hook", "--types", "payment.refunded", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &added), out)
	require.True(t, added.Created)
	require.Regexp(t, `^whsec_`, added.Secret)
	require.Equal(t, []string{"payment.refunded"}, added.Types)
	out = billingStdout(t, env, "endpoints", "add", "https://example.test/hook")
	require.Contains(t, out, "already registered")
	require.NotContains(t, out, "whsec_", "the secret is shown once")
	require.Contains(t, runBillingFail(t, env, "endpoints", "add", "ftp://example.test/x"), "http or https")
	require.Contains(t, runBillingFail(t, env, "endpoints", "add", "https://example.test/y", "--types", "nope"), "unknown event type")
	require.Contains(t, billingStdout(t, env, "endpoints", "list"), "1 endpoint\n")

	id := strconv.FormatInt(added.ID, 10)
	out = billingStdout(t, env, "endpoints", "rotate-secret", id, "--grace", "1h")
	require.Contains(t, out, "new secret (shown once): whsec_")
	require.Contains(t, billingStdout(t, env, "endpoints", "disable", id, "--reason", "maintenance"), "disabled: maintenance")
	require.Contains(t, billingStdout(t, env, "endpoints", "enable", id), "enabled")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	ev, err := events.EmitTx(ctx, tx, events.Event{Type: events.PaymentRefunded, Key: "cli", PlayerID: 9,
		Data: events.PaymentRefundedData{Provider: "stripe", PaymentID: "cs_1", OrderID: 1, Amount: 5, Currency: "usd"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Contains(t, billingStdout(t, env, "events", "list", "--player", "9"), ev.ID+" payment.refunded player=9 seq=1")
	var listed []events.Stored
	require.NoError(t, json.Unmarshal([]byte(billingStdout(t, env, "events", "list", "--type", "payment.refunded", "--json")), &listed))
	require.Len(t, listed, 1)
	out = billingStdout(t, env, "events", "resend", ev.ID, "--json")
	require.JSONEq(t, `{"event_id":"`+ev.ID+`","deliveries":1}`, out)
	var shown events.Shown
	require.NoError(t, json.Unmarshal([]byte(billingStdout(t, env, "events", "show", ev.ID, "--json")), &shown))
	require.Len(t, shown.Deliveries, 2, "the emission's and the resend's")
	require.Contains(t, runBillingFail(t, env, "events", "show", "evt_missing"), "event not found")
}
