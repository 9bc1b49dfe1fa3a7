package paddle_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

// The listing is newest first and stops at the first event older than
// since; a failed page is fetched again.
func TestListNewestFirstUntilSince(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	now := time.Now()
	fake.AddEvent("paddle", providerevents.CompletedEventAt("paddle", "evt_old", 1, 999, "usd", now.Add(-2*time.Hour)))
	fake.AddEvent("paddle", providerevents.CompletedEventAt("paddle", "evt_new", 2, 999, "usd", now))
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
