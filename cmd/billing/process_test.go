package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/jobs"
)

// TestProcesses runs the binary as an operator would: migrate (twice, then
// two at once on another fresh database), web and worker as real processes,
// then SIGTERM.
func TestProcesses(t *testing.T) {
	t.Parallel()
	dbURL := testdb.EmptyURL(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_LOG_FORMAT=json"}
	requireMigrate(t, env)
	ctx := context.Background()

	addr, opsAddr := freeAddr(t), freeAddr(t)
	base, ops := "http://"+addr, "http://"+opsAddr
	webEnv := append(env, "BILLING_HTTP_ADDR="+addr, "BILLING_METRICS_ADDR="+opsAddr,
		"BILLING_RIVERUI_USER=ops", "BILLING_RIVERUI_PASSWORD=s3cret")
	web := startProc(t, webEnv, "web")
	worker := startProc(t, env, "worker")
	waitHealthy(t, base, web, waitDeadline)
	waitHealthy(t, ops, web, waitDeadline)
	requireNoPublicMetrics(t, base)

	code, _ := get(t, base+"/riverui/", "", "")
	require.Equal(t, 401, code)
	code, _ = get(t, base+"/riverui/", "ops", "wrong")
	require.Equal(t, 401, code)
	code, body := get(t, base+"/riverui/", "ops", "s3cret")
	require.Equal(t, 200, code)
	require.Contains(t, body, "<html")
	code, body = get(t, base+"/riverui/api/jobs?state=completed", "ops", "s3cret")
	require.Equal(t, 200, code)
	require.Contains(t, body, `"data"`)

	// A job inserted by an insert-only client is worked by the worker
	// process, and both River metrics families appear.
	dbPool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer dbPool.Close()
	client, err := jobs.NewClient(dbPool, jobs.Options{})
	require.NoError(t, err)
	_, err = client.Insert(ctx, jobs.NoopArgs{}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var state string
		_ = dbPool.QueryRow(ctx, "SELECT state::text FROM river_job WHERE kind = 'noop'").Scan(&state)
		return state == "completed"
	}, waitDeadline, 50*time.Millisecond)
	code, body = get(t, ops+"/metrics", "", "")
	require.Equal(t, 200, code)
	require.Contains(t, body, `billing_river_jobs{kind="noop",state="completed"} 1`)
	require.Contains(t, body, "go_goroutines")
	code, _ = get(t, base+"/riverui/api/jobs?state=completed", "ops", "s3cret")
	require.Equal(t, 200, code)

	web.stop(t, syscall.SIGTERM, waitDeadline)
	worker.stop(t, syscall.SIGTERM, waitDeadline)
	require.True(t, strings.Contains(worker.out.String(), `"msg":"worker stopped"`), worker.out.String())
}

// requireMigrate runs migrate on env's database twice (the second applies
// nothing, as text and as JSON), then two at once on another fresh
// database: each migration is applied once.
func requireMigrate(t *testing.T, env []string) {
	t.Helper()
	first := runBilling(t, env, "migrate", "--json")
	var applied struct {
		River []int   `json:"river_applied"`
		App   []int64 `json:"app_applied"`
	}
	require.NoError(t, json.Unmarshal([]byte(lastLine(first)), &applied), first)
	require.NotEmpty(t, applied.River)
	require.NotEmpty(t, applied.App)
	require.Contains(t, runBilling(t, env, "migrate"), "migrate: applied 0 River migrations and 0 app migrations\n")
	require.Equal(t, `{"river_applied":[],"app_applied":[]}`, lastLine(runBilling(t, env, "migrate", "--json")))

	concurrentURL := testdb.EmptyURL(t)
	var wg sync.WaitGroup
	outs := make([][]byte, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(billingBin(t), "migrate")
			cmd.Env = append(cmd.Environ(), "BILLING_DATABASE_URL="+concurrentURL)
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0], string(outs[0]))
	require.NoError(t, errs[1], string(outs[1]))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, concurrentURL)
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&n))
	require.Positive(t, n)
	var distinct int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0").Scan(&distinct))
	require.Equal(t, distinct, n, "each migration applied once")
}

// lastLine is the last line of out (runBilling mixes the JSON logs of
// stderr with stdout).
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// TestConfigErrorsAreOneLine checks a bad value exits non-zero with one line
// naming the key, never a panic.
func TestConfigErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"database_url":      {"BILLING_DATABASE_URL="},
		"enforcer_schedule": {"BILLING_DATABASE_URL=postgres://h/db", "BILLING_ENFORCER_SCHEDULE=bogus"},
		"service_day_tz":    {"BILLING_DATABASE_URL=postgres://h/db", "BILLING_SERVICE_DAY_TZ=Nowhere/Land"},
		"http_addr":         {"BILLING_DATABASE_URL=postgres://h/db", "BILLING_HTTP_ADDR=nope"},
	}
	for key, env := range cases {
		cmd := exec.Command(billingBin(t), "web")
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, key)
		require.Contains(t, string(out), key)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(string(out)), "\n")+1, "one line: %s", out)
		require.NotContains(t, string(out), "panic")
	}
}

// TestUnreachableDatabaseIsOneLine: a database that does not answer is one
// line that names its address, without repeating what the driver says.
func TestUnreachableDatabaseIsOneLine(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t) // nothing listens there
	code, out := runBillingExit(t, []string{"BILLING_DATABASE_URL=postgres://billing@" + addr + "/billing?connect_timeout=5"}, "debts", "list")
	require.Equal(t, 1, code)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line: %s", out)
	require.True(t, strings.HasPrefix(out, "billing: database: failed to connect to `user=billing database=billing`: "+addr), out)
	require.Equal(t, 2, strings.Count(out, addr), "the address as the driver says it (the attempt and its dial), once: %s", out)
}
