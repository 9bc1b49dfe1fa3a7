package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/devwebhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/stripe"
	"github.com/fibe-dev/billing/internal/stripemock"
)

// TestListAgainstStripeMock validates our Events API request (types
// filter, created range, page size) against Stripe's specification.
func TestListAgainstStripeMock(t *testing.T) {
	t.Parallel()
	url := stripemock.Start(t)
	var ids []string
	err := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: url}).ListEvents(context.Background(),
		time.Now().Add(-72*time.Hour), func(id string, body []byte) error {
			ids = append(ids, id)
			require.Contains(t, string(body), `"object"`)
			return nil
		})
	require.NoError(t, err)
	require.NotEmpty(t, ids, "stripe-mock answers its fixture event")
}

// A listing longer than a page is read page by page, each event once, and
// a page that fails is fetched again within the retry budget, not the
// whole listing: 250 events, the second page failing twice.
func TestListPagesRetriedOneByOne(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	for i := range 250 {
		fake.AddEvent("stripe", devwebhook.CompletedEvent("stripe", fmt.Sprintf("evt_%03d", i), int64(i+1), 999, "usd"))
	}
	d := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: fake.URL,
		Retry: provider.Retry{Budget: 5 * time.Second, BaseDelay: 10 * time.Millisecond}})
	var ids []string
	err := d.ListEvents(context.Background(), time.Now().Add(-time.Hour), func(id string, _ []byte) error {
		ids = append(ids, id)
		if len(ids) == 1 {
			fake.FailRequests(http.StatusServiceUnavailable, http.StatusInternalServerError)
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, ids, 250)
	for i, id := range ids {
		require.Equal(t, fmt.Sprintf("evt_%03d", 249-i), id, "newest first, each once")
	}
	require.Equal(t, 3+2, fake.Requests(), "three pages, the second fetched three times")
}
