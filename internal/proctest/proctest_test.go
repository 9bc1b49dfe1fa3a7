package proctest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/proctest"
)

// TestRequireTool finds a tool by absolute path or on PATH, and skips
// without it when CI is not set.
func TestRequireTool(t *testing.T) {
	t.Setenv("CI", "")
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	require.Equal(t, sh, proctest.RequireTool(t, "apt-get install dash", "", "/nonexistent/tool", "sh"))
	require.Equal(t, sh, proctest.RequireTool(t, "apt-get install dash", sh))

	skipped := t.Run("missing", func(t *testing.T) {
		proctest.RequireTool(t, "nowhere", "/nonexistent/tool", "no-such-tool-billing")
		t.Error("not reached: the test is skipped")
	})
	require.True(t, skipped, "a skipped subtest counts as passed")
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

// TestSkipFixture is run by TestScriptReportsSkippedTools through
// scripts/test: a test whose tool is missing, and (when asked) one that
// fails.
func TestSkipFixture(t *testing.T) {
	switch os.Getenv("PROCTEST_FIXTURE") {
	case "skip":
		proctest.RequireTool(t, "apt-get install -y no-such-package", "no-such-tool-billing")
	case "fail":
		t.Run("sub", func(t *testing.T) { proctest.RequireTool(t, "make it", "/nonexistent/other-tool") })
		t.Error("this fixture fails")
	default:
		t.Skip("a fixture of TestScriptReportsSkippedTools")
	}
}

// TestScriptReportsSkippedTools runs scripts/test (the README's test
// command) on fixture tests: after go test's own output it lists each test
// skipped for a missing tool with how to install the tool, and it exits with
// go test's status.
func TestScriptReportsSkippedTools(t *testing.T) {
	t.Parallel()
	run := func(fixture string) (string, error) {
		cmd := exec.Command("../../scripts/test", "-run", "^TestSkipFixture$", "./internal/proctest/")
		cmd.Env = append(os.Environ(), "CI=", "PROCTEST_FIXTURE="+fixture)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("skip")
	require.NoError(t, err, out)
	require.Contains(t, out, "ok  \tgithub.com/fibe-dev/billing/internal/proctest")
	require.Contains(t, out, "scripts/test: 1 test was skipped because a tool is not installed:\n"+
		"  no-such-tool-billing (install: apt-get install -y no-such-package): TestSkipFixture\n")

	out, err = run("fail")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	require.Equal(t, 1, exit.ExitCode())
	require.Contains(t, out, "--- FAIL: TestSkipFixture")
	require.Contains(t, out, "  other-tool (install: make it): TestSkipFixture/sub\n", "the summary follows a failed run too")

	out, err = run("")
	require.NoError(t, err, out)
	require.Contains(t, out, "scripts/test: no test was skipped for a missing tool")
}

// TestReadmeTestCommandIsCI: README's set-up holds exactly its two
// commands, the second being scripts/test, which .ci/run runs too; and the
// prerequisites name every tool the tests look for.
func TestReadmeTestCommandIsCI(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	setup := section(string(readme), "## Set up")
	var commands []string
	for _, l := range strings.Split(setup, "\n") {
		if strings.HasPrefix(l, "    ") && strings.TrimSpace(l) != "" {
			commands = append(commands, strings.TrimSpace(l))
		}
	}
	require.Equal(t, []string{"go run ./cmd/billing dev", "scripts/test"}, commands)
	ci, err := os.ReadFile("../../.ci/run")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^scripts/test$`, string(ci), ".ci/run runs the README's test command")
	for _, tool := range []string{"stripe-mock", "chromium", "curl", "promtool", "prometheus", "redocly"} {
		require.Contains(t, setup, tool, "README's set-up names %s", tool)
	}
}

// section is the text of a markdown section, up to the next heading of
// its level.
func section(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := doc[i+len(heading)+2:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}
