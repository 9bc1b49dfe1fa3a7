package paddle_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/devwebhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

// The listing is newest first and stops at the first event older than
// since; a failed page is fetched again.
func TestListNewestFirstUntilSince(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	now := time.Now()
	fake.AddEvent("paddle", devwebhook.CompletedEventAt("paddle", "evt_old", 1, 999, "usd", now.Add(-2*time.Hour)))
	fake.AddEvent("paddle", devwebhook.CompletedEventAt("paddle", "evt_new", 2, 999, "usd", now))
	d := paddle.New(provider.Options{APIKey: "pdl_test", APIURL: fake.URL,
		Retry: provider.Retry{Budget: 2 * time.Second, BaseDelay: 10 * time.Millisecond}})
	fake.FailRequests(http.StatusBadGateway)
	var ids []string
	err := d.ListEvents(context.Background(), now.Add(-time.Hour), func(id string, body []byte) error {
		ids = append(ids, id)
		ev, err := d.Parse(body)
		require.NoError(t, err, "a listed event reads like its webhook")
		require.Equal(t, id, ev.ID)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"evt_new"}, ids)
	require.Equal(t, 2, fake.Requests(), "the failed page, then the page")
}

// A listing longer than a page is read page by page, each event once, and
// a page that fails is fetched again within the retry budget: 250 events,
// the second page failing twice.
func TestListPagesRetriedOneByOne(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	now := time.Now()
	for i := range 250 {
		fake.AddEvent("paddle", devwebhook.CompletedEventAt("paddle", fmt.Sprintf("evt_%03d", i), int64(i+1), 999, "usd", now))
	}
	d := paddle.New(provider.Options{APIKey: "pdl_test", APIURL: fake.URL,
		Retry: provider.Retry{Budget: 5 * time.Second, BaseDelay: 10 * time.Millisecond}})
	var ids []string
	err := d.ListEvents(context.Background(), now.Add(-time.Hour), func(id string, _ []byte) error {
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
	require.Equal(t, 2+2, fake.Requests(), "two pages, the second fetched three times")
}
