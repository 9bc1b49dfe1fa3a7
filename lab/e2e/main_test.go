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

func TestMain(m *testing.M) { testdb.Main(m) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// billingBinary builds cmd/billing once for the package's process tests.
func billingBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "billing-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = e2e.BuildBinary(context.Background(), "../..", dir)
	})
	if buildErr != nil {
		t.Fatal(fmt.Errorf("build billing: %w", buildErr))
	}
	return binPath
}
