package proctest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/proctest"
)

// TestRequireTool finds a tool by absolute path or on PATH, and skips
// without it when CI is not set.
func TestRequireTool(t *testing.T) {
	t.Setenv("CI", "")
	skips := filepath.Join(t.TempDir(), "skips")
	t.Setenv(proctest.SkipsEnv, skips) // not the file of the run this test is part of
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	require.Equal(t, sh, proctest.RequireTool(t, "apt-get install dash", "", "/nonexistent/tool", "sh"))
	require.Equal(t, sh, proctest.RequireTool(t, "apt-get install dash", sh))

	skipped := t.Run("missing", func(t *testing.T) {
		proctest.RequireTool(t, "nowhere", "/nonexistent/tool", "no-such-tool-billing")
		t.Error("not reached: the test is skipped")
	})
	require.True(t, skipped, "a skipped subtest counts as passed")
	recorded, err := os.ReadFile(skips)
	require.NoError(t, err)
	require.Equal(t, "tool\tnowhere\tTestRequireTool/missing\n", string(recorded), "the skip is recorded for the summary")
}

// TestRequireToolFailsUnderCI: under CI a missing tool fails the test
// instead of skipping it. The failure is checked in a child run of this
// test binary, where failing is the expected outcome.
func TestRequireToolFailsUnderCI(t *testing.T) {
	if os.Getenv("PROCTEST_CHILD") != "" {
		proctest.RequireTool(t, "nowhere", "no-such-tool-billing")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRequireToolFailsUnderCI$", "-test.v")
	cmd.Env = append(os.Environ(), "CI=true", "PROCTEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "under CI a missing tool fails the test:\n%s", out)
	require.Contains(t, string(out), "--- FAIL: TestRequireToolFailsUnderCI")
	require.Contains(t, string(out), ".ci/run installs it")
	require.NotContains(t, string(out), "--- SKIP")
}
