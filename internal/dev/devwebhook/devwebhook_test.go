package devwebhook_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/dev/devwebhook"
)

func TestSignRefusesUnknownProviders(t *testing.T) {
	t.Parallel()
	_, _, err := devwebhook.Sign("paypal", "k", nil, time.Unix(1_700_000_000, 0))
	require.ErrorIs(t, err, fulfillment.ErrUnknownProvider)
}
