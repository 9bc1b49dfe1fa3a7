// Package scripts_test checks the repository's scripts as a newcomer and
// CI run them: scripts/test (README's test command), scripts/fuzz-short.
package scripts_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/proctest"
)

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
		cmd := exec.Command("./test", "-run", "^TestSkipFixture$", "./scripts/")
		cmd.Env = append(os.Environ(), "CI=", "PROCTEST_FIXTURE="+fixture)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("skip")
	require.NoError(t, err, out)
	require.Contains(t, out, "ok  \tgithub.com/fibe-dev/billing/scripts")
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
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	setup := section(string(readme), "## Set up")
	var commands []string
	for _, l := range strings.Split(setup, "\n") {
		if strings.HasPrefix(l, "    ") && strings.TrimSpace(l) != "" {
			commands = append(commands, strings.TrimSpace(l))
		}
	}
	require.Equal(t, []string{"go run ./cmd/billing dev", "scripts/test"}, commands)
	ci, err := os.ReadFile("../.ci/run")
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

// TestFuzzShortSaysWhatCIRuns: the usage comment of scripts/fuzz-short
// names the run .ci/run makes.
func TestFuzzShortSaysWhatCIRuns(t *testing.T) {
	t.Parallel()
	ci, err := os.ReadFile("../.ci/run")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^[^#\n]*\bscripts/fuzz-short (\S+)`).FindStringSubmatch(string(ci))
	require.NotNil(t, m, ".ci/run runs scripts/fuzz-short")
	script, err := os.ReadFile("fuzz-short")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^#\s+scripts/fuzz-short `+regexp.QuoteMeta(m[1])+`\s+#.*\bCI\b`, string(script))
	require.NotRegexp(t, `(?m)^#\s+scripts/fuzz-short\s+#.*\bCI\b`, string(script), "the bare form is not what CI runs")
}

// TestScriptsParse: every script of this directory is valid bash (bash -n
// reads it without running it), so a script CI does not run, such as
// scripts/ab-bench or scripts/scale-bench, cannot rot into a syntax error.
func TestScriptsParse(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"ab-bench", "cpu-by-package", "fuzz-short", "scale-bench", "test"} {
		out, err := exec.Command("bash", "-n", name).CombinedOutput()
		require.NoError(t, err, "bash -n scripts/%s: %s", name, out)
	}
}
