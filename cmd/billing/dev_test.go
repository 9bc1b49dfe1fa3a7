package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// devDeadline bounds every wait of the dev process tests: a start, the
// banner, an order's fulfilment, a clean stop. Each takes a second or
// two on an idle machine and many times that at load 30; a cold start
// (initdb, then every migration) took more than three minutes at load 78
// (two suites at once). The tests wait on the condition, and only a dev
// that never gets there fails them.
const devDeadline = 6 * time.Minute

// TestDevRestart starts `billing dev` twice on the same data directory: the
// second start reuses the cluster (and the demo player), and nothing is left
// running afterwards.
func TestDevRestart(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "dev")
	var keys, exports []string
	for i, label := range []string{"cold", "warm"} {
		addr := freeAddr(t)
		p := startProc(t, []string{"BILLING_HTTP_ADDR=" + addr, "BILLING_DATABASE_URL="}, "dev", "--dir", dir)
		took := waitHealthy(t, "http://"+addr, p, devDeadline)
		t.Logf("billing dev %s start: first healthy /healthz after %v", label, took.Round(time.Millisecond))
		require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "Ctrl-C stops everything") }, devDeadline, 20*time.Millisecond)
		keys = append(keys, between(p.out.String(), "API key:\n  ", "\n"))
		require.NotEmpty(t, keys[i])
		metricsURL := strings.TrimSpace(between(p.out.String(), "Metrics    ", "\n"))
		require.NotEqual(t, "http://"+addr+"/metrics", metricsURL, "metrics are not on the public listener")
		code, body := get(t, metricsURL, "", "")
		require.Equal(t, 200, code, body)
		require.Contains(t, body, "billing_marquees_unfunded", "the web side's gauges on the one metrics listener")
		requireNoPublicMetrics(t, "http://"+addr)
		requireBannerLinks(t, p.out.String())
		requireTimelinePage(t, p.out.String())
		require.Contains(t, p.out.String(), "Listening  on loopback only ("+addr+")")
		exports = append(exports, requireDevDatabaseURL(t, p.out.String(), dir))
		p.stop(t, syscall.SIGINT, devDeadline)
	}
	require.Equal(t, keys[0], keys[1], "the demo player survives a restart")
	require.Equal(t, exports[0], exports[1], "the database keeps its port (and URL) across restarts")
	out, _ := exec.Command("pgrep", "-f", "postgres.*-D "+dir).Output()
	require.Empty(t, strings.TrimSpace(string(out)), "no postgres left behind")
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	if j := strings.Index(s, end); j >= 0 {
		return s[:j]
	}
	return s
}

// requireDevDatabaseURL checks the banner's export line: it names the URL
// kept in <dir>/database.url (mode 0600), and pasted into a shell it points
// the operator commands at dev's database. It returns the line.
func requireDevDatabaseURL(t *testing.T, banner, dir string) string {
	t.Helper()
	export := strings.TrimSpace(between(banner, "\n  export BILLING_DATABASE_URL=", "\n"))
	require.NotEmpty(t, export, banner)
	info, err := os.Stat(filepath.Join(dir, "database.url"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	kept, err := os.ReadFile(filepath.Join(dir, "database.url"))
	require.NoError(t, err)
	require.Equal(t, "'"+strings.TrimSpace(string(kept))+"'", export)
	require.Contains(t, string(kept), ":billing@", "the full URL, password included")
	for cmd, want := range map[string]string{
		"ledger verify": "ledger clean", "payments list": "1 payment\n", "debts list": "0 open debts",
	} {
		sh := exec.Command("bash", "-c", "export BILLING_DATABASE_URL="+export+"; \"$BILLING\" "+cmd)
		sh.Env = append(os.Environ(), "BILLING="+billingBin(t), "BILLING_DATABASE_URL=")
		out, err := sh.CombinedOutput()
		require.NoError(t, err, "%s:\n%s", cmd, out)
		require.Contains(t, string(out), want, cmd)
	}
	return export
}

// requireBannerLinks: the banner's API link answers the index and its API
// document link the document.
func requireBannerLinks(t *testing.T, banner string) {
	t.Helper()
	api := strings.Fields(between(banner, "\n  API        ", "\n"))[0]
	code, body := get(t, api, "", "")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"api_document":"/v1/openapi.json"`)
	require.Contains(t, body, `"river_ui":"/riverui/queues"`)
	doc := strings.TrimSpace(between(banner, "\n  API doc    ", "\n"))
	code, body = get(t, doc, "", "")
	require.Equal(t, 200, code)
	require.Contains(t, body, `"openapi":"3.1.0"`)
}

// requireTimelinePage: the banner's operator page refuses a visitor and
// answers the River UI's printed credentials.
func requireTimelinePage(t *testing.T, banner string) {
	t.Helper()
	url := strings.Fields(between(banner, "Timeline   ", "\n"))[0]
	user, pass := between(banner, "(user ", ","), between(banner, ", password ", ")")
	code, _ := get(t, url, "", "")
	require.Equal(t, 401, code)
	code, body := get(t, url, user, pass)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "Unapplied payments")
}
