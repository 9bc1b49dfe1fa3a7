package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/formation"
	"github.com/fibe-dev/billing/internal/kit/proctest"
)

// haDeadline bounds each wait of TestDevHA: a formation starts in about
// half a minute and fails over in about ten seconds on an idle machine;
// at load 30 each takes several times that. Every wait is on a condition
// (the monitor's state, an answer, a line), never on the clock.
const haDeadline = 5 * time.Minute

// TestDevHA: `billing dev --ha` runs on a formation whose servers listen
// on loopback only and ask for a password, keeps its multi-host URL in
// <dir>/database.url and prints its export line, which the operator
// commands take; it prints how to lose its primary. Doing as it says
// (kill -KILL of the primary's process group) costs some 503s, then
// conversions are created again on the new primary, the [ha] lines show
// the promotion, the lost node is brought back only after it (never
// promoted again: the monitor ends with it a secondary), and Ctrl-C
// leaves nothing.
func TestDevHA(t *testing.T) {
	t.Parallel()
	proctest.RequireTool(t, formation.Install, "pg_autoctl")
	dir := filepath.Join(t.TempDir(), "dev")
	addr := freeAddr(t)
	p := startProc(t, []string{"BILLING_HTTP_ADDR=" + addr, "BILLING_DATABASE_URL="}, "dev", "--ha", "--dir", dir)
	waitHealthy(t, "http://"+addr, p, haDeadline)
	waitOutput(t, p, "Monitor: ")
	// The worker's River client starts beside the web: lose the primary
	// only once it runs (a client whose start fails ends dev, as it ends
	// billing worker, for its supervisor to restart).
	waitOutput(t, p, "River client started")
	out := p.out.String()
	requireDevDatabaseURL(t, out, dir)
	dbURL, err := os.ReadFile(filepath.Join(dir, "database.url"))
	require.NoError(t, err)
	monitor := strings.Trim(between(out, "pg_autoctl show state --monitor ", "\n"), "'")
	require.NotEmpty(t, monitor, out)
	requireLockedFormation(t, strings.TrimSpace(string(dbURL)), monitor)

	key := between(out, "API key:\n  ", "\n")
	m := regexp.MustCompile(`kill -KILL -- -(\d+)   # (node\d) \(primary`).FindStringSubmatch(out)
	require.NotNil(t, m, "no kill line for the primary:\n%s", out)
	pgid, _ := strconv.Atoi(m[1])
	lost := m[2]

	require.NoError(t, syscall.Kill(-pgid, syscall.SIGKILL))
	statuses := writeThroughFailover(t, addr, key)
	require.Positive(t, statuses[http.StatusServiceUnavailable], "the lost primary cost some 503s: %v", statuses)
	require.Positive(t, statuses[http.StatusCreated], "writes came back: %v", statuses)
	for code := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusServiceUnavailable}, code, "%v", statuses)
	}
	waitOutput(t, p, "-> primary/primary")
	waitMonitor(t, monitor, lost)
	out = p.out.String()
	promoted, back := -1, strings.Index(out, lost+": the monitor has replaced it")
	for _, m := range promotion.FindAllStringSubmatchIndex(out, -1) {
		if out[m[2]:m[3]] != lost {
			promoted = m[0]
			break
		}
	}
	require.True(t, promoted >= 0 && back > promoted, "%s is brought back after another node's promotion, not before:\n%s", lost, out)
	verifyReachable(t, strings.TrimSpace(string(dbURL)))

	p.stop(t, syscall.SIGINT, haDeadline)
	_, err = os.Stat(filepath.Join(dir, "ha"))
	require.True(t, os.IsNotExist(err), "the formation is removed")
}

// verifyReachable runs billing ledger verify on dbURL and requires a clean
// audit. A run that could not connect (at load 78 a SCRAM exchange
// outlasted the connect timeout) is run again, until haDeadline: the test
// is about the audit's verdict, which a connect that timed out never gave.
func verifyReachable(t *testing.T, dbURL string) {
	t.Helper()
	deadline := time.Now().Add(haDeadline)
	for {
		cmd := exec.Command(billingBin(t), "ledger", "verify")
		cmd.Env = append(os.Environ(), "BILLING_DATABASE_URL="+dbURL)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		unreached := strings.Contains(string(out), "database: failed to connect")
		require.True(t, unreached && time.Now().Before(deadline), "billing ledger verify: %v\n%s", err, out)
		t.Logf("billing ledger verify did not reach the database, again: %s", out)
		time.Sleep(time.Second)
	}
}

// promotion is an [ha] line of a node taking the primary's role.
var promotion = regexp.MustCompile(`\[ha\] \S+ (node\d): \S+ -> (?:wait_primary/wait_primary|primary/primary)\n`)

// waitOutput waits for s in p's output.
func waitOutput(t *testing.T, p *proc, s string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), s) }, haDeadline, 50*time.Millisecond,
		"no %q in %v:\n%s", s, haDeadline, p.out.String())
}

// writeThroughFailover creates conversions until one succeeds after a
// 503 (the failover came and went), and counts the answers.
func writeThroughFailover(t *testing.T, addr, key string) map[int]int {
	t.Helper()
	statuses := map[int]int{}
	hc := http.Client{Timeout: apiRequestDeadline}
	for i, deadline := 0, time.Now().Add(haDeadline); time.Now().Before(deadline); i++ {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/conversions", strings.NewReader(`{"mana":1}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("dev-ha-%d", i))
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			statuses[resp.StatusCode]++
			if resp.StatusCode == http.StatusCreated && statuses[http.StatusServiceUnavailable] > 0 {
				return statuses
			}
		}
		time.Sleep(200 * time.Millisecond) // pacing, not a verdict
	}
	t.Fatalf("no conversion created after a 503 within %v: %v", haDeadline, statuses)
	return nil
}

// waitMonitor waits until the monitor has lost back in service as a
// secondary and another node as primary: the lost node did not take its
// place back.
func waitMonitor(t *testing.T, monitor, lost string) {
	t.Helper()
	var last any
	require.Eventually(t, func() bool {
		states, err := monitorStates(monitor)
		if err != nil {
			last = err
			return false
		}
		last = states
		primaries := 0
		for name, s := range states {
			if s == "primary/primary" && name != lost {
				primaries++
			}
		}
		return primaries == 1 && states[lost] == "secondary/secondary"
	}, haDeadline, 500*time.Millisecond, "the monitor never had %s back as a secondary under another primary; last: %v", lost, last)
}

// monitorStates is reported/goal state by node name, as the monitor has it.
func monitorStates(monitor string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), apiRequestDeadline)
	defer cancel()
	conn, err := pgx.Connect(ctx, monitor)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT nodename, reportedstate::text || '/' || goalstate::text
		FROM pgautofailover.node WHERE formationid = 'default'`)
	states := map[string]string{}
	var name, state string
	_, err = pgx.ForEachRow(rows, []any{&name, &state}, func() error { states[name] = state; return nil })
	return states, err
}

// requireLockedFormation: every server of dev's formation (each host of
// its multi-host URL, and the monitor) listens on loopback only and
// refuses a connection without a password.
func requireLockedFormation(t *testing.T, dbURL, monitor string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), haDeadline)
	defer cancel()
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	// Each host once: sslmode=prefer lists it twice (with TLS, without).
	servers, seen := []*pgx.ConnConfig{}, map[string]bool{}
	hosts := []*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}
	for _, fb := range append(hosts, cfg.Fallbacks...) {
		if key := fmt.Sprintf("%s:%d", fb.Host, fb.Port); !seen[key] {
			seen[key] = true
			c := cfg.Copy()
			c.Host, c.Port, c.Fallbacks, c.ValidateConnect, c.TLSConfig = fb.Host, fb.Port, nil, nil, nil
			servers = append(servers, c)
		}
	}
	require.Len(t, servers, 3, "every data node in %s", redactURL(dbURL))
	mon, err := pgx.ParseConfig(monitor)
	require.NoError(t, err)
	for _, c := range append(servers, mon) {
		conn, err := pgx.ConnectConfig(ctx, c)
		require.NoError(t, err, "%s:%d with the password", c.Host, c.Port)
		var listen string
		require.NoError(t, conn.QueryRow(ctx, `SHOW listen_addresses`).Scan(&listen))
		conn.Close(ctx)
		require.Equal(t, "localhost", listen, "%s:%d listens on loopback only", c.Host, c.Port)
		for _, user := range []string{c.User, "postgres"} {
			anon := c.Copy()
			anon.User, anon.Password = user, ""
			conn, err := pgx.ConnectConfig(ctx, anon)
			if err == nil {
				conn.Close(ctx)
			}
			require.ErrorContains(t, err, "password", "%s:%d lets %s in without a password", c.Host, c.Port, user)
		}
	}
}
