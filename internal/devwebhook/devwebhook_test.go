package devwebhook_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/devwebhook"
)

// TestProductionCodeDoesNotImportIt: the intake, the HTTP API and the
// provider drivers (the production paths a provider's delivery takes) must
// not depend on the development fixtures; only `billing dev` and tests may.
func TestProductionCodeDoesNotImportIt(t *testing.T) {
	t.Parallel()
	const self = "github.com/fibe-dev/billing/internal/devwebhook"
	for _, pkg := range []string{"github.com/fibe-dev/billing/internal/webhook", "github.com/fibe-dev/billing/internal/httpapi",
		"github.com/fibe-dev/billing/internal/provider/drivers"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		deps := strings.Fields(string(out))
		require.Contains(t, deps, pkg, "go list answered for %s", pkg)
		require.NotContains(t, deps, self, "%s imports %s", pkg, self)
	}
}

func TestSignRefusesUnknownProviders(t *testing.T) {
	t.Parallel()
	_, _, err := devwebhook.Sign("paypal", "k", nil, time.Unix(1_700_000_000, 0))
	require.ErrorIs(t, err, fulfillment.ErrUnknownProvider)
}
