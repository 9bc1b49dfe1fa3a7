package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/proctest"
)

// TestDevSeedPrintsWorkingExamples starts `billing dev`, then runs every
// curl line it printed and the Go SDK snippet, as a user would paste them.
func TestDevSeedPrintsWorkingExamples(t *testing.T) {
	t.Parallel()
	proctest.RequireTool(t, "apt-get install -y curl", "curl")
	proctest.RequireTool(t, "apt-get install -y openssl", "openssl") // the curl lines make keys with openssl rand
	dir := filepath.Join(t.TempDir(), "dev")
	addr := freeAddr(t)
	p := startProc(t, []string{"BILLING_HTTP_ADDR=" + addr, "BILLING_DATABASE_URL="}, "dev", "--dir", dir)
	waitHealthy(t, "http://"+addr, p, devDeadline)
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "Ctrl-C stops everything") }, devDeadline, 20*time.Millisecond)
	banner := p.out.String()
	require.Contains(t, banner, "(funded today)")

	var lines []string
	for _, l := range strings.Split(banner, "\n") {
		if strings.HasPrefix(l, "  curl ") || strings.HasPrefix(l, "  REQ=") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	require.Len(t, lines, 6)
	answers := map[int]map[string]any{}
	for i, l := range lines {
		out, err := exec.Command("bash", "-c", l).CombinedOutput()
		require.NoError(t, err, "%s:\n%s", l, out)
		var v map[string]any
		require.NoError(t, json.Unmarshal(out, &v), "%s:\n%s", l, out)
		require.NotContains(t, v, "code", "an error answer: %s", out)
		answers[i] = v
	}
	require.Equal(t, true, answers[1]["funded"], "the demo Marquee is funded")
	require.Equal(t, "fulfilled", answers[2]["status"], "the demo order is paid and fulfilled")
	require.Equal(t, "playground_create", answers[5]["kind"])

	runSDKProgram(t, banner)
	p.stop(t, syscall.SIGINT, devDeadline)
}

// runSDKProgram follows the banner's Go SDK section as printed: its
// commands in a new directory, its program saved as main.go, then built and
// run against the dev server (offline: from the module cache).
func runSDKProgram(t *testing.T, banner string) {
	t.Helper()
	section := between(banner, sdkHeader+"\n", "\nCtrl-C stops everything")
	setup, program, ok := strings.Cut(section, "save this program as main.go, then\n")
	require.True(t, ok, "the SDK section:\n%s", section)
	run, program, ok := strings.Cut(program, "\n\n")
	require.True(t, ok)
	require.True(t, strings.HasPrefix(program, "package main\n"), "a complete program:\n%s", program)
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	require.Contains(t, setup, "-replace=github.com/fibe-dev/billing='"+root+"'", "dev names its own clone")

	dir := t.TempDir()
	sh := func(lines string) {
		cmd := exec.Command("bash", "-e", "-c", lines)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s\n%s", lines, out)
		if strings.Contains(lines, "go run") {
			require.Regexp(t, `^\d+ succeeded\n$`, string(out), "the program's output")
		}
	}
	sh(setup)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644))
	sh(run)
}
