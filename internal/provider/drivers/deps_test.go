package drivers_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/fibe-dev/billing/"

// TestConsumersKnowNoProvider: what Stripe, Paddle and Creem are lives in
// their driver packages only. The packages that verify, open, list and
// refund through drivers (and the money package above all) import no
// driver and no provider SDK.
func TestConsumersKnowNoProvider(t *testing.T) {
	t.Parallel()
	forbidden := []string{"github.com/stripe/stripe-go", "github.com/PaddleHQ/paddle-go-sdk",
		module + "internal/provider/stripe", module + "internal/provider/paddle", module + "internal/provider/creem",
		module + "internal/provider/drivers"}
	for _, pkg := range []string{"fulfillment", "internal/webhook", "internal/checkout", "internal/reconcile",
		"internal/httpapi", "jobs", "config"} {
		out, err := exec.Command("go", "list", "-deps", module+pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		deps := strings.Fields(string(out))
		require.Contains(t, deps, module+pkg, "go list answered for %s", pkg)
		for _, d := range deps {
			for _, f := range forbidden {
				require.False(t, strings.HasPrefix(d, f), "%s depends on %s", pkg, d)
			}
		}
	}
}
