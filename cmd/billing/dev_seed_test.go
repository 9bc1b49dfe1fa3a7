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

	"github.com/fibe-dev/billing/internal/proctest"
)

// TestDevSeedPrintsWorkingExamples starts `billing dev`, then runs every
// curl line it printed and the Go SDK snippet, as a user would paste them.
func TestDevSeedPrintsWorkingExamples(t *testing.T) {
	t.Parallel()
	proctest.RequireTool(t, "apt-get install -y curl", "curl")
	dir := filepath.Join(t.TempDir(), "dev")
	addr := freeAddr(t)
	p := startProc(t, []string{"BILLING_HTTP_ADDR=" + addr, "BILLING_DATABASE_URL="}, "dev", "--dir", dir)
	waitHealthy(t, "http://"+addr, p, 60*time.Second)
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "Ctrl-C stops everything") }, 10*time.Second, 20*time.Millisecond)
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

	// The SDK snippet, compiled in a throwaway module that points here.
	snippet := between(banner, "Go SDK (package github.com/fibe-dev/billing/fibe):\n", "\n\n")
	require.NotEmpty(t, snippet)
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	mod := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module demo\n\ngo 1.26\n\nrequire github.com/fibe-dev/billing v0.0.0\n\nreplace github.com/fibe-dev/billing => "+root+"\n"), 0o644))
	src := "package main\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"log\"\n\n\t\"github.com/fibe-dev/billing/fibe\"\n)\n\nfunc main() {\n" + snippet + "\n}\n"
	require.NoError(t, os.WriteFile(filepath.Join(mod, "main.go"), []byte(src), 0o644))
	run := exec.Command("go", "run", ".")
	run.Dir = mod
	run.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := run.CombinedOutput()
	require.NoError(t, err, "%s\n%s", src, out)
	require.Regexp(t, `^\d+ succeeded\n$`, string(out))

	p.stop(t, syscall.SIGINT, 20*time.Second)
}
