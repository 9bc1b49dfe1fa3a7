package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// billingStdout runs billing and returns its stdout alone (logs go to
// stderr), requiring success.
func billingStdout(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(billingBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "billing %s:\n%s%s", strings.Join(args, " "), out, stderr.String())
	return string(out)
}

// An event whose job was cancelled before it ran is orphaned: ledger verify
// names it, webhooks list --outcome orphaned lists it, redrive --dry-run
// changes nothing, redrive re-enqueues it once (again: nothing), and close
// records another one refused on purpose; ledger verify is then clean.
func TestWebhooksRedriveAndClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	inserts, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	intakes := provider.Select[webhook.Intake](drivers.New(map[string]provider.Options{
		provider.Stripe: {WebhookSecrets: []string{"whsec_cli"}}}))
	intake := httptest.NewServer(webhook.NewHandler(webhook.Options{Pool: pool, River: inserts, Providers: intakes,
		Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(intake.Close)
	p, _, err := players.Create(ctx, pool, "cli")
	require.NoError(t, err)
	deliver := func(body []byte) {
		h, v, err := providerevents.Sign("stripe", "whsec_cli", body, time.Now())
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, intake.URL+"/webhooks/stripe", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(h, v)
		res, err := intake.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
	}
	var orders [2]*fulfillment.Order
	for i := range orders {
		orders[i], err = fulfillment.CreateCheckout(ctx, pool, fulfillment.DefaultSKUs(), fulfillment.CheckoutParams{PlayerID: p.ID,
			SKU: "mana_1000", Provider: "stripe"})
		require.NoError(t, err)
		deliver(providerevents.CompletedEvent("stripe", "evt_orphan_"+string(rune('a'+i)), orders[i].ID, 999, "usd"))
	}
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE kind = 'fulfill_order'`)
	require.NoError(t, err)

	code, out := runBillingExit(t, env, "ledger", "verify")
	require.Equal(t, 1, code)
	require.Contains(t, out, "invariant 11 event_without_outcome stripe/evt_orphan_a")

	var listed []webhook.ClaimedEvent
	require.NoError(t, json.Unmarshal([]byte(billingStdout(t, env, "webhooks", "list", "--outcome", "orphaned", "--json")), &listed))
	require.Len(t, listed, 2)

	var dry redriveResult
	require.NoError(t, json.Unmarshal([]byte(billingStdout(t, env, "webhooks", "redrive", "--all", "--dry-run", "--json")), &dry))
	require.True(t, dry.DryRun)
	require.Len(t, dry.Orphaned, 2)
	require.Zero(t, countRows(t, pool, `SELECT count(*) FROM river_job WHERE state = 'available'`), "a dry run enqueues nothing")

	text := billingStdout(t, env, "webhooks", "close", "--provider", "stripe", "--event-id", "evt_orphan_b", "--reason", "test event")
	require.Contains(t, text, "closed stripe evt_orphan_b")

	var done redriveResult
	require.NoError(t, json.Unmarshal([]byte(billingStdout(t, env, "webhooks", "redrive", "--provider", "stripe",
		"--event-id", "evt_orphan_a", "--json")), &done))
	require.Equal(t, 1, done.Redriven)
	require.Contains(t, billingStdout(t, env, "webhooks", "redrive", "--all"), "nothing to redrive")
	require.EqualValues(t, 1, countRows(t, pool, `SELECT count(*) FROM river_job WHERE state = 'available'`))

	fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{})
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_events WHERE outcome = 'applied'`).Scan(&n)
		return err == nil && n == 1
	}, waitDeadline, 20*time.Millisecond, "the re-driven payment was never applied")
	billingStdout(t, env, "ledger", "verify")

	var refused []webhook.ClaimedEvent
	require.NoError(t, json.Unmarshal([]byte(billingStdout(t, env, "webhooks", "list", "--outcome", "refused", "--json")), &refused))
	require.Len(t, refused, 1)
	require.Equal(t, "closed by operator: test event", refused[0].Reason)
	require.Contains(t, billingStdout(t, env, "webhooks", "close", "--provider", "stripe", "--event-id", "evt_orphan_a",
		"--reason", "late"), "already has its outcome")
	require.Contains(t, runBillingFail(t, env, "webhooks", "close", "--provider", "stripe", "--event-id", "evt_nope",
		"--reason", "x"), "no such claimed event")
	require.Contains(t, runBillingFail(t, env, "webhooks", "redrive"), "give --provider and --event-id, or --all")
}
