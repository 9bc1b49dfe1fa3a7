package devwebhook_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProductionCodeDoesNotImportIt: the intake and the HTTP API (the
// production paths a provider's delivery takes) must not depend on the
// development fixtures; only `billing dev` and tests may.
func TestProductionCodeDoesNotImportIt(t *testing.T) {
	t.Parallel()
	const self = "github.com/fibe-dev/billing/internal/devwebhook"
	for _, pkg := range []string{"github.com/fibe-dev/billing/internal/webhook", "github.com/fibe-dev/billing/internal/httpapi"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		deps := strings.Fields(string(out))
		require.Contains(t, deps, pkg, "go list answered for %s", pkg)
		require.NotContains(t, deps, self, "%s imports %s", pkg, self)
	}
}
