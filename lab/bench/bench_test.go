package bench

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// pgbench15 is the output of PostgreSQL 15's pgbench for a 1 s run.
const pgbench15 = `pgbench: setting random seed to 1
pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/billing-pgbench-1/script.sql
scaling factor: 1
query mode: prepared
number of clients: 2
number of threads: 2
maximum number of tries: 1
duration: 1 s
number of transactions actually processed: 24288
number of failed transactions: 0 (0.000%)
latency average = 0.084 ms
initial connection time = 24.110 ms
tps = 23767.654735 (without initial connection time)
statement latencies in milliseconds and failures:
         0.000           0  \set k random(1, 10)
         0.049           0  SELECT :k;
`

// TestParsePgBench reads pgbench's report: rate, count, mean latency (as
// p50), failed transactions; an aborted run's output is an error, not zeros.
func TestParsePgBench(t *testing.T) {
	t.Parallel()
	r, err := parsePgBench("claim", 2, 1, pgbench15)
	require.NoError(t, err)
	require.Equal(t, "claim", r.Name)
	require.Equal(t, 2, r.Clients)
	require.Equal(t, 1.0, r.Seconds)
	require.Equal(t, 23767.654735, r.OpsPerSec)
	require.Equal(t, int64(24288), r.Ops)
	require.Equal(t, 0.084, r.P50ms)
	require.Zero(t, r.Errors)
	require.Contains(t, r.Notes, "latency")

	failed := strings.Replace(pgbench15, "number of failed transactions: 0 (0.000%)", "number of failed transactions: 17 (0.070%)", 1)
	r, err = parsePgBench("claim", 2, 1, failed)
	require.NoError(t, err)
	require.Equal(t, int64(17), r.Errors)

	aborted := `pgbench (15.18 (Debian 15.18-0+deb12u1))
pgbench: error: client 0 script 0 aborted in command 0 query 0: ERROR:  division by zero
number of transactions actually processed: 0
number of failed transactions: 0 (NaN%)
pgbench: error: Run was aborted; the above results are incomplete.
`
	_, err = parsePgBench("claim", 2, 1, aborted)
	require.ErrorContains(t, err, "unexpected output")
	_, err = parsePgBench("claim", 2, 1, "")
	require.Error(t, err)
}

// TestPgBenchRuns runs the real pgbench against a real database: the
// baseline every ratio divides by is measured, not parsed from nothing.
func TestPgBenchRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	r, err := pgbenchThatRan(t, func() (*Report, error) {
		return PgBench(ctx, "select", url, "\\set k random(1, :n)\nSELECT :k;\n", 2, time.Second, map[string]string{"n": "10"})
	})
	require.NoError(t, err)
	require.Positive(t, r.Ops)
	require.Positive(t, r.OpsPerSec)
	require.Positive(t, r.P50ms)
	require.Zero(t, r.Errors)

	_, err = pgbenchThatRan(t, func() (*Report, error) {
		return PgBench(ctx, "broken", url, "SELECT 1/0;\n", 1, time.Second, nil)
	})
	require.ErrorContains(t, err, "division by zero", "a failing script is an error, not a 0 ops/s baseline")
}

// pgbenchThatRan runs a pgbench run again while it ran no statement at all:
// its clients connect inside its duration, which on a loaded machine can
// take the whole second. Any other outcome is returned, under a generous
// deadline.
func pgbenchThatRan(t *testing.T, run func() (*Report, error)) (*Report, error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := run()
		idle := err != nil && strings.Contains(err.Error(), "actually processed: 0\n") && !strings.Contains(err.Error(), "ERROR:")
		if !idle || time.Now().After(deadline) {
			return r, err
		}
		t.Logf("pgbench ran nothing within its duration; running it again:\n%v", err)
	}
}

// TestSummarize: percentiles are nearest-rank over every client's
// latencies, rates and times rounded to two decimals.
func TestSummarize(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	lat := [][]time.Duration{{5 * ms, 1 * ms, 3 * ms}, {2 * ms, 4 * ms}, nil}
	r := Summarize("x", 3, 2*time.Second, lat, 7)
	require.Equal(t, int64(5), r.Ops)
	require.Equal(t, 2.5, r.OpsPerSec)
	require.Equal(t, 3.0, r.P50ms)
	require.Equal(t, 5.0, r.P99ms)
	require.Equal(t, int64(7), r.Errors)
	require.Equal(t, 2.0, r.Seconds)

	empty := Summarize("none", 1, 0, nil, 0)
	require.Zero(t, empty.OpsPerSec)
	require.Zero(t, empty.P99ms)

	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i)*ms)
	}
	r = Summarize("h", 1, time.Second, [][]time.Duration{hundred}, 0)
	require.Equal(t, 50.0, r.P50ms)
	require.Equal(t, 99.0, r.P99ms)
}

// TestAddBaseline: the ratio is the system's rate over the baseline's,
// rounded; a baseline that measured nothing gives no ratio, never +Inf.
func TestAddBaseline(t *testing.T) {
	t.Parallel()
	r := &Report{Name: "sys", OpsPerSec: 1000}
	r.AddBaseline("pgbench", &Report{OpsPerSec: 3000})
	r.AddBaseline("noop", &Report{OpsPerSec: 0})
	require.Equal(t, 0.33, r.Ratios["pgbench"])
	require.NotContains(t, r.Ratios, "noop")
	require.Len(t, r.Baselines, 2)
}

// TestLoad: a closed loop counts successes and errors per client and stops
// at the deadline; an op cut off by the deadline is neither.
func TestLoad(t *testing.T) {
	t.Parallel()
	var calls, fails atomic.Int64
	start := time.Now()
	r := Load(context.Background(), "load", 3, 300*time.Millisecond, func(ctx context.Context, client int, seq int64) error {
		calls.Add(1)
		if seq%3 == 2 {
			fails.Add(1)
			return errors.New("refused")
		}
		time.Sleep(time.Millisecond)
		return nil
	})
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 5*time.Second)
	require.Equal(t, 3, r.Clients)
	require.Positive(t, r.Ops)
	require.Positive(t, r.Errors)
	require.LessOrEqual(t, r.Ops+r.Errors, calls.Load())
	// At most one op per client is cut off by the deadline and not counted.
	require.LessOrEqual(t, r.Errors, fails.Load())
	require.GreaterOrEqual(t, r.Errors, fails.Load()-3)
	require.GreaterOrEqual(t, r.Ops+r.Errors, calls.Load()-3)
}

// TestWithAppName sets application_name in both connection string forms.
func TestWithAppName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u:p@h:5432/db?application_name=bench-web-1&sslmode=disable",
		withAppName("postgres://u:p@h:5432/db?sslmode=disable", "bench-web-1"))
	require.Equal(t, "host=h dbname=db application_name=bench-web-1", withAppName("host=h dbname=db", "bench-web-1"))
}
