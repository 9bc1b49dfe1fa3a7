package stripe_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/stripemock"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/stripe"
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
