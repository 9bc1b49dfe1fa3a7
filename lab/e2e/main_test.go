package e2e_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/lab/e2e"
)

func TestMain(m *testing.M) {
	code := testdb.Run(m)
	if binDir != "" {
		_ = os.RemoveAll(binDir) // os.Exit runs no deferred call
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string // the built binary's directory, removed when the tests end
	binPath   string
	buildErr  error
)

// billingBinary builds cmd/billing once for the package's process tests.
func billingBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "billing-e2e-bin-")
		if buildErr != nil {
			return
		}
		binPath, buildErr = e2e.BuildBinary(context.Background(), "../..", binDir)
	})
	if buildErr != nil {
		t.Fatal(fmt.Errorf("build billing: %w", buildErr))
	}
	return binPath
}
