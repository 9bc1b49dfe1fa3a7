package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/formation"
	"github.com/fibe-dev/billing/internal/proctest"
)

// TestDevHA: `billing dev --ha` runs on a formation and prints how to lose
// its primary; doing as it says (kill -KILL of the primary's process
// group) costs some 503s, then conversions are created again on the new
// primary, the [ha] lines show the promotion, and Ctrl-C leaves nothing.
func TestDevHA(t *testing.T) {
	t.Parallel()
	proctest.RequireTool(t, formation.Install, "pg_autoctl")
	dir := filepath.Join(t.TempDir(), "dev")
	addr := freeAddr(t)
	p := startProc(t, []string{"BILLING_HTTP_ADDR=" + addr, "BILLING_DATABASE_URL="}, "dev", "--ha", "--dir", dir)
	waitHealthy(t, "http://"+addr, p, 3*time.Minute)
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "Monitor: ") }, 10*time.Second, 20*time.Millisecond)
	// The worker's River client starts beside the web: lose the primary
	// only once it runs (a client whose start fails ends dev, as it ends
	// billing worker, for its supervisor to restart).
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "River client started") }, 60*time.Second, 50*time.Millisecond)
	out := p.out.String()
	key := between(out, "API key:\n  ", "\n")
	m := regexp.MustCompile(`kill -KILL -- -(\d+)   # node\d \(primary`).FindStringSubmatch(out)
	require.NotNil(t, m, "no kill line for the primary:\n%s", out)
	pgid, _ := strconv.Atoi(m[1])

	require.NoError(t, syscall.Kill(-pgid, syscall.SIGKILL))
	statuses := map[int]int{}
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/conversions", strings.NewReader(`{"mana":1}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("dev-ha-%d", i))
		hc := http.Client{Timeout: 5 * time.Second}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			statuses[resp.StatusCode]++
			if resp.StatusCode == http.StatusCreated && statuses[http.StatusServiceUnavailable] > 0 {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Positive(t, statuses[http.StatusServiceUnavailable], "the lost primary cost some 503s: %v", statuses)
	require.Positive(t, statuses[http.StatusCreated], "writes came back: %v", statuses)
	for code := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusServiceUnavailable}, code, "%v", statuses)
	}
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "-> primary/primary") },
		10*time.Second, 50*time.Millisecond, "the [ha] lines show the promotion:\n%s", p.out.String())

	p.stop(t, syscall.SIGINT, 60*time.Second)
	_, err := os.Stat(filepath.Join(dir, "ha"))
	require.True(t, os.IsNotExist(err), "the formation is removed")
}
