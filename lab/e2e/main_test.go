package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

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

// billingBinary builds cmd/billing once for the package's process tests,
// with the race detector when they run under it: the processes are then
// checked for data races too (dataRace), and the build shares the tests'
// own compiled dependencies instead of compiling them a second time.
func billingBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "billing-e2e-bin-")
		if buildErr != nil {
			return
		}
		binPath, buildErr = e2e.BuildBinary(context.Background(), "../..", binDir, raceEnabled)
	})
	if buildErr != nil {
		t.Fatal(fmt.Errorf("build billing: %w", buildErr))
	}
	return binPath
}

// processLog creates the log file of a billing process a test starts, in
// the test's temporary directory, and after the test (the process killed
// by then: cleanups run last-registered first) fails it if the process
// reported a data race there.
func processLog(t *testing.T, name string) (string, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	require.NoError(t, err)
	t.Cleanup(func() {
		f.Close()
		require.NoError(t, dataRace(path))
	})
	return path, f
}

// dataRace is an error quoting the first data race any of the logs
// reports. Under -race the billing processes are built with the race
// detector too (billingBinary), which reports a race on stderr and goes on.
func dataRace(logs ...string) error {
	for _, name := range logs {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		if i := bytes.Index(b, []byte("WARNING: DATA RACE")); i >= 0 {
			return fmt.Errorf("%s reports a data race:\n%s", filepath.Base(name), b[i:min(len(b), i+6000)])
		}
	}
	return nil
}
