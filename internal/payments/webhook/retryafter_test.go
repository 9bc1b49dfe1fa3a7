package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/payments/webhook"
)

// A provider told 503 is told when to retry, like every 503 we answer.
func TestServiceUnavailableCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(webhook.NewHandler(webhook.Options{Providers: intakes(nil)})) // no secrets: not configured
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/webhooks/stripe", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
}
