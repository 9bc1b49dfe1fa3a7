package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

// Scaling out (`--processes 1,2,3`): the system side of a benchmark runs as
// K real `billing worker` or `billing web` processes of this executable,
// all against the one database of BILLING_DATABASE_URL, while this process
// only generates load and watches PostgreSQL. Each configuration records
// PostgreSQL's own view: commits/s (pg_stat_database.xact_commit deltas),
// the connections the K processes hold and how many are active, and how
// busy the machine's CPUs were (/proc/stat).

// appNamePrefix tags the spawned processes' connections (application_name)
// so pg_stat_activity can tell them from the bench's own.
const appNamePrefix = "billing-scale-"

// processesFlag declares --processes and its companions on fs.
func processesFlag(fs *pflag.FlagSet, role string) {
	fs.IntSlice("processes", nil, "scale-out mode: run the measurement once per listed count K (e.g. 1,2,3) "+
		"with K real 'billing "+role+"' processes of this executable against the one database, and print a table")
	fs.Float64("max-interference", 15, "scale-out mode: measure a configuration again when other processes "+
		"(not this bench, its processes or PostgreSQL) used more than this percentage of the machine's CPU (0: never)")
	fs.Int("attempts", 3, "scale-out mode: measurements per configuration at most; the least disturbed one is kept")
}

// scalePlan is the scale-out mode's flags; nil without --processes.
type scalePlan struct {
	counts    []int
	maxOthers float64
	attempts  int
}

// processCounts reads and checks --processes and its companions.
func processCounts(fs *pflag.FlagSet) (*scalePlan, error) {
	procs, _ := fs.GetIntSlice("processes")
	if len(procs) == 0 {
		return nil, nil
	}
	for _, k := range procs {
		if k < 1 || k > 64 {
			return nil, fmt.Errorf("--processes: each count must be within 1..64, got %d", k)
		}
	}
	plan := &scalePlan{counts: procs}
	plan.maxOthers, _ = fs.GetFloat64("max-interference")
	plan.attempts, _ = fs.GetInt("attempts")
	if plan.attempts < 1 {
		return nil, errors.New("--attempts must be at least 1")
	}
	return plan, nil
}

// measure runs one configuration up to plan.attempts times, again while
// other processes took more than plan.maxOthers percent of the CPU, and
// keeps the least disturbed attempt.
func (plan *scalePlan) measure(env Env, name string, k int, once func(attempt int) (*Report, error)) (*Report, error) {
	others := func(r *Report) float64 {
		v, _ := r.Notes["machine_cpu_others_pct"].(float64)
		return v
	}
	var best *Report
	for a := 1; a <= plan.attempts; a++ {
		r, err := once(a)
		if err != nil {
			return nil, err
		}
		if best == nil || others(r) < others(best) {
			best = r
		}
		best.Note("attempts", a)
		if plan.maxOthers <= 0 || others(r) <= plan.maxOthers {
			break
		}
		if a < plan.attempts {
			env.Progressf("%s: %d process(es): other processes used %.0f%% of the CPU; measuring again (attempt %d of %d)",
				name, k, others(r), a+1, plan.attempts)
		}
	}
	return best, nil
}

// procGroup is K running `billing <role>` processes (internal/dev/procs).
type procGroup struct {
	role  string
	procs []*procs.Proc
	logs  []*procs.TailBuffer // the last 8 KiB of each one's output
}

// startProcs starts k `billing <role>` processes of the billing binary exe;
// env(i) adds to (and overrides) this process's environment for the i-th.
func startProcs(exe, role string, k int, env func(i int) []string) (*procGroup, error) {
	if exe == "" {
		return nil, fmt.Errorf("bench: no billing binary to start %s processes (Env.Billing)", role)
	}
	g := &procGroup{role: role}
	for i := range k {
		log := &procs.TailBuffer{Max: 8 << 10}
		p := procs.New(fmt.Sprintf("%s process %d of %d", role, i+1, k), exe, env(i), log, role)
		if err := p.Start(); err != nil {
			_ = g.stop()
			return nil, fmt.Errorf("bench: %w", err)
		}
		g.procs, g.logs = append(g.procs, p), append(g.logs, log)
	}
	return g, nil
}

func (g *procGroup) pids() []int {
	out := make([]int, len(g.procs))
	for i, p := range g.procs {
		out[i] = p.Pid()
	}
	return out
}

// exited reports a process that ended while it should be running.
func (g *procGroup) exited() error {
	for i, p := range g.procs {
		if !p.Running() {
			return fmt.Errorf("bench: %s exited early (%v):\n%s", p.Name, p.ExitErr(), g.logs[i])
		}
	}
	return nil
}

// stop interrupts every process at once (graceful shutdown: running jobs
// and requests finish), waits for them and kills any still alive after 40s.
func (g *procGroup) stop() error {
	errs := make([]error, len(g.procs))
	var wg sync.WaitGroup
	for i, p := range g.procs {
		wg.Go(func() {
			if err := p.StopWith(os.Interrupt, 40*time.Second); err != nil {
				errs[i] = fmt.Errorf("bench: %s: %w:\n%s", p.Name, err, g.logs[i])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// withAppName returns dbURL with application_name set, in URL or
// keyword/value form.
func withAppName(dbURL, name string) string {
	if strings.Contains(dbURL, "://") {
		if u, err := url.Parse(dbURL); err == nil {
			q := u.Query()
			q.Set("application_name", name)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return dbURL + " application_name=" + name
}

// childEnv is the environment of the i-th spawned process.
func childEnv(env Env, role string, i int) []string {
	return []string{
		"BILLING_DATABASE_URL=" + withAppName(env.DatabaseURL, appNamePrefix+role+"-"+strconv.Itoa(i+1)),
		"BILLING_METRICS_ADDR=", // K workers cannot share one metrics port
		"BILLING_LOG_FORMAT=json",
	}
}

// pgWatch samples PostgreSQL while a configuration runs.
type pgWatch struct {
	pool      *pgxpool.Pool
	counter0  commitSample
	cpu0      cpuTimes
	pids      []int          // this bench, the spawned processes, PostgreSQL's
	ticks0    map[int]uint64 // their CPU ticks at the start
	start     time.Time
	stopc     chan struct{}
	done      chan struct{}
	mu        sync.Mutex
	series    []commitSample
	maxProcs  int // connections held by the spawned processes
	maxTotal  int // all client connections to the database
	activeSum int
	samples   int
}

// watchPG records the commit counter now and samples connections every
// 250ms until finish. children are the spawned processes: with this one and
// PostgreSQL's own they are "ours" when the machine's CPU time is split
// into ours and everything else's (another workload on a shared machine).
func watchPG(ctx context.Context, pool *pgxpool.Pool, children []int) (*pgWatch, error) {
	w := &pgWatch{pool: pool, stopc: make(chan struct{}), done: make(chan struct{})}
	w.pids = append([]int{os.Getpid()}, children...)
	w.pids = append(w.pids, postgresPIDs(ctx, pool)...)
	w.ticks0 = procTicks(w.pids)
	flushOwnStats(ctx, pool)
	var err error
	if w.counter0, err = commits(ctx, pool); err != nil {
		return nil, err
	}
	w.cpu0 = readCPU()
	w.start = w.counter0.at
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			w.sample(ctx)
			select {
			case <-tick.C:
			case <-w.stopc:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return w, nil
}

// commitSample is the commit counter at one moment.
type commitSample struct {
	at                 time.Time
	commits, rollbacks int64
}

func (w *pgWatch) sample(ctx context.Context) {
	var procs, active, total int
	c := commitSample{at: time.Now()}
	err := w.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE application_name LIKE $1),
		count(*) FILTER (WHERE application_name LIKE $1 AND state = 'active'), count(*),
		(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
		(SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database())
		FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'
		AND pid <> pg_backend_pid()`, appNamePrefix+"%").Scan(&procs, &active, &total, &c.commits, &c.rollbacks)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.series = append(w.series, c)
	w.maxProcs, w.maxTotal = max(w.maxProcs, procs), max(w.maxTotal, total)
	w.activeSum += active
	w.samples++
}

// finish stops sampling and notes PostgreSQL's side of the run on r: its
// commit rate, commits per measured operation (at r's rate), connections
// and CPU. loadEnd is when the load stopped, zero if it still runs: the
// counter is then read from the last sample taken under load, because
// backends that go idle hold up to a second of commits unreported (they
// flush their statistics at most once a second, and when idle only after
// ten).
func (w *pgWatch) finish(ctx context.Context, r *Report, loadEnd time.Time) error {
	end, err := commits(ctx, w.pool)
	cpu1 := readCPU()
	// PostgreSQL processes that started during the window (a new pool
	// connection, an autovacuum worker) count whole.
	ticks1 := procTicks(append(w.pids, postgresPIDs(ctx, w.pool)...))
	close(w.stopc)
	<-w.done
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !loadEnd.IsZero() {
		for _, s := range w.series {
			if s.at.Before(loadEnd) {
				end = s
			}
		}
	}
	if elapsed := end.at.Sub(w.start).Seconds(); elapsed > 0 {
		rate := float64(end.commits-w.counter0.commits) / elapsed
		r.Note("pg_commits_per_sec", round(rate))
		r.Note("pg_rollbacks_per_sec", round(float64(end.rollbacks-w.counter0.rollbacks)/elapsed))
		if r.OpsPerSec > 0 {
			r.Note("pg_commits_per_op", round(rate/r.OpsPerSec))
		}
	}
	r.Note("pg_connections_processes_max", w.maxProcs)
	r.Note("pg_connections_total_max", w.maxTotal)
	if w.samples > 0 {
		r.Note("pg_active_processes_mean", round(float64(w.activeSum)/float64(w.samples)))
	}
	if busy, ok := w.cpu0.busyUntil(cpu1); ok {
		r.Note("machine_cpu_busy_pct", round(busy*100))
		var ours uint64
		for pid, t1 := range ticks1 {
			if t0, ok := w.ticks0[pid]; !ok {
				ours += t1
			} else if t1 >= t0 {
				ours += t1 - t0
			}
		}
		total := float64(cpu1.busy + cpu1.idle - w.cpu0.busy - w.cpu0.idle)
		others := float64(cpu1.busy-w.cpu0.busy) - float64(cpu1.irq-w.cpu0.irq) - float64(ours)
		r.Note("machine_cpu_others_pct", round(max(others, 0)/total*100))
	}
	return nil
}

// flushOwnStats makes this bench's idle connections report their pending
// statistics now: an idle backend otherwise reports its last second of
// commits (seeding, say) only after ten seconds, inside the next window.
func flushOwnStats(ctx context.Context, pool *pgxpool.Pool) {
	for _, c := range pool.AcquireAllIdle(ctx) {
		_, _ = c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		c.Release()
	}
}

// commits reads the database's committed and rolled-back transaction
// counters. Busy backends flush them at most once a second: a rate over a
// window under steady load is right, the last second before a read lags.
func commits(ctx context.Context, pool *pgxpool.Pool) (commitSample, error) {
	c := commitSample{at: time.Now()}
	err := pool.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database
		WHERE datname = current_database()`).Scan(&c.commits, &c.rollbacks)
	if err != nil {
		return c, fmt.Errorf("bench: pg_stat_database: %w", err)
	}
	return c, nil
}

// cpuTimes is the first line of /proc/stat: all CPUs' busy and idle ticks,
// and of the busy ones those spent in interrupts (loopback TCP is mostly
// softirq, charged to no process).
type cpuTimes struct{ busy, idle, irq uint64 }

func readCPU() cpuTimes {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, f := range fields[1:8] { // user nice system idle iowait irq softirq
		v, _ := strconv.ParseUint(f, 10, 64)
		switch i {
		case 3, 4:
			t.idle += v
		case 5, 6:
			t.irq += v
			t.busy += v
		default:
			t.busy += v
		}
	}
	return t
}

// postgresPIDs are the server processes of the database's cluster (client
// backends and background processes), when it runs on this machine.
func postgresPIDs(ctx context.Context, pool *pgxpool.Pool) []int {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return pids
		}
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.HasPrefix(string(comm), "postgres") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procTicks reads each live pid's user+system CPU ticks from /proc.
func procTicks(pids []int) map[int]uint64 {
	out := make(map[int]uint64, len(pids))
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command name; utime and stime are
		// the 14th and 15th of the whole line.
		_, rest, ok := strings.Cut(string(raw), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		s, _ := strconv.ParseUint(f[12], 10, 64)
		out[pid] = u + s
	}
	return out
}

func (t cpuTimes) busyUntil(u cpuTimes) (float64, bool) {
	busy, idle := float64(u.busy-t.busy), float64(u.idle-t.idle)
	if t.busy+t.idle == 0 || busy+idle <= 0 {
		return 0, false
	}
	return busy / (busy + idle), true
}

// scaleReport turns one report per configuration into the benchmark's
// report: the last configuration (the most processes) on top, the others
// as baselines named processes_K, so the ratios are the speed-up over them.
func scaleReport(env Env, name, unit string, rows []*Report, extra map[string]*Report) *Report {
	top := *rows[len(rows)-1]
	top.Name = name
	top.Baselines, top.Ratios = nil, nil
	for i, r := range rows[:len(rows)-1] {
		name := fmt.Sprintf("processes_%v", r.Notes["processes"])
		if _, dup := top.Baselines[name]; dup {
			name = fmt.Sprintf("%s_%d", name, i+1)
		}
		top.AddBaseline(name, r)
	}
	for k, r := range extra {
		top.AddBaseline(k, r)
	}
	env.Progressf("\n%s", scaleTable(name, unit, rows, extra))
	return &top
}

// scaleTable renders the configurations as a Markdown table.
func scaleTable(name, unit string, rows []*Report, extra map[string]*Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s processes | %s | %s/s | vs first | p50 ms | p99 ms | errors | PG commits/s | commits per op | PG rollbacks/s | PG conns of the processes (max) | active (mean) | machine CPU busy | of it, other processes | attempts |\n",
		name, concurrencyLabel(rows), unit)
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	first := rows[0].OpsPerSec
	for _, r := range rows {
		speedup := "-"
		if first > 0 {
			speedup = fmt.Sprintf("%.2fx", r.OpsPerSec/first)
		}
		fmt.Fprintf(&b, "| %v | %d | %.0f | %s | %.1f | %.1f | %d | %.0f | %v | %.0f | %v | %v | %v%% | %v%% | %v |\n",
			r.Notes["processes"], r.Clients, r.OpsPerSec, speedup, r.P50ms, r.P99ms, r.Errors,
			r.Notes["pg_commits_per_sec"], r.Notes["pg_commits_per_op"], r.Notes["pg_rollbacks_per_sec"],
			r.Notes["pg_connections_processes_max"],
			r.Notes["pg_active_processes_mean"], r.Notes["machine_cpu_busy_pct"], r.Notes["machine_cpu_others_pct"], r.Notes["attempts"])
	}
	for k, r := range extra {
		fmt.Fprintf(&b, "\n%s (raw SQL, no processes): %.0f/s at %d clients, mean latency %.1f ms\n", k, r.OpsPerSec, r.Clients, r.P50ms)
	}
	return b.String()
}

func concurrencyLabel(rows []*Report) string {
	if c, ok := rows[0].Notes["concurrency"].(string); ok {
		return c
	}
	return "clients"
}

// runFundingProcesses measures fund_day jobs/s worked by K real `billing
// worker` processes (the production queue configuration, jobs.Queues()) for
// each K in procs. Players and their Sparks are seeded once; each
// configuration gets n fresh Marquees (one per player) whose fund_day jobs
// are enqueued as one backlog before its workers start, so every
// configuration works the same jobs from the same state. The rate is
// completed jobs in a window of env.Duration that opens once the workers
// have completed their first job plus a second of warm-up.
func runFundingProcesses(ctx context.Context, env Env, plan *scalePlan, n int) (*Report, error) {
	run := time.Now().UnixNano()
	w := env.Wallet
	env.Progressf("funding: creating %d players with Sparks, and their first %d Marquees", n, n)
	players, marquees, err := seedFunding(ctx, env, w, n, run)
	if err != nil {
		return nil, err
	}
	day := enforcer.ServiceDay(time.Now(), env.TZ)
	var rows []*Report
	fresh := true // the seeded Marquees are unused
	for _, k := range plan.counts {
		row, err := plan.measure(env, "funding", k, func(int) (*Report, error) {
			if !fresh {
				if marquees, err = addMarquees(ctx, env.Pool, players); err != nil {
					return nil, err
				}
			}
			fresh = false
			row, err := fundingWithProcesses(ctx, env, k, marquees, day)
			// Stop these Marquees whatever happened: no later sweep (nor
			// worker) may fund them.
			if _, serr := env.Pool.Exec(context.WithoutCancel(ctx), `UPDATE marquees SET desired_state = 'stopped',
				status = 'stopped' WHERE id = ANY($1)`, marquees); serr != nil && err == nil {
				err = serr
			}
			return row, err
		})
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return scaleReport(env, "funding", "fund_day jobs", rows, nil), nil
}

func fundingWithProcesses(ctx context.Context, env Env, k int, marquees []int64, day string) (*Report, error) {
	maxWorkers := jobs.Queues()[jobs.QueueFunding].MaxWorkers
	client, err := jobs.NewClient(env.Pool, jobs.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	var waiting int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1
		AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`, jobs.QueueFunding).Scan(&waiting); err != nil {
		return nil, err
	}
	if waiting > 0 {
		return nil, fmt.Errorf("bench funding: queue %q already holds %d unfinished jobs: use a scratch database", jobs.QueueFunding, waiting)
	}
	var lastJob int64
	if err := env.Pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&lastJob); err != nil {
		return nil, err
	}
	args := make([]river.InsertManyParams, len(marquees))
	for i, id := range marquees {
		args[i] = river.InsertManyParams{Args: enforcer.FundDayArgs{MarqueeID: id, Day: day}}
	}
	env.Progressf("funding: %d worker process(es): enqueueing %d fund_day jobs", k, len(args))
	if err := insertAll(ctx, env.Pool, client, args); err != nil {
		return nil, err
	}
	var lo, hi int64
	if err := env.Pool.QueryRow(ctx, `SELECT min(id), max(id) FROM river_job WHERE id > $1 AND kind = 'fund_day'`,
		lastJob).Scan(&lo, &hi); err != nil {
		return nil, err
	}
	progress := func() (completed, available int64, err error) {
		err = env.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'),
			count(*) FILTER (WHERE state = 'available') FROM river_job WHERE id BETWEEN $1 AND $2`, lo, hi).Scan(&completed, &available)
		return completed, available, err
	}

	env.Progressf("funding: starting %d `billing worker` process(es), %d funding workers each", k, maxWorkers)
	g, err := startProcs(env.Billing, "worker", k, func(i int) []string { return childEnv(env, "worker", i) })
	if err != nil {
		return nil, err
	}
	defer g.stop() //nolint:errcheck // the measured path stops them itself
	deadline := time.Now().Add(60 * time.Second)
	for {
		done, _, err := progress()
		if err != nil {
			return nil, err
		}
		if done > 0 {
			break
		}
		if err := g.exited(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench funding: no fund_day job completed within 60s of starting %d workers", k)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The elected leader sweeps on start (RunOnStart): its pages of
	// Marquees and its inserts (all duplicates of the backlog) are start-up
	// work, not the steady state, so the window opens after it finished.
	for time.Now().Before(deadline) {
		var total, unfinished int
		if err := env.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE finalized_at IS NULL)
			FROM river_job WHERE id > $1 AND kind = 'enforcer_sweep'`, lastJob).Scan(&total, &unfinished); err != nil {
			return nil, err
		}
		if total > 0 && unfinished == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // warm-up: every process fetching
	env.Progressf("funding: measuring %s", env.Duration)
	watch, err := watchPG(ctx, env.Pool, g.pids())
	if err != nil {
		return nil, err
	}
	c0, _, err := progress()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	end := t0.Add(env.Duration)
	var c1, left int64
	for {
		time.Sleep(250 * time.Millisecond)
		if c1, left, err = progress(); err != nil {
			return nil, err
		}
		if left == 0 || !time.Now().Before(end) {
			break
		}
	}
	t1 := time.Now()
	r := &Report{Name: fmt.Sprintf("funding_%d_processes", k), Clients: k * maxWorkers,
		Seconds: round(t1.Sub(t0).Seconds()), Ops: c1 - c0}
	r.OpsPerSec = round(float64(r.Ops) / t1.Sub(t0).Seconds())
	if err := watch.finish(ctx, r, time.Time{}); err != nil {
		return nil, err
	}
	if err := g.exited(); err != nil {
		return nil, err
	}
	env.Progressf("funding: stopping the workers")
	if err := g.stop(); err != nil {
		return nil, err
	}
	// Latency as PostgreSQL saw it: fetched (attempted_at) to completed.
	var p50, p99 float64
	if err := env.Pool.QueryRow(ctx, `SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY d), 0),
		coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY d), 0) FROM (
		SELECT extract(epoch FROM finalized_at - attempted_at) * 1000 AS d FROM river_job
		WHERE id BETWEEN $1 AND $2 AND state = 'completed' AND finalized_at BETWEEN $3 AND $4) s`,
		lo, hi, t0, t1).Scan(&p50, &p99); err != nil {
		return nil, err
	}
	r.P50ms, r.P99ms = round(p50), round(p99)
	// Errors: jobs that failed, and completed jobs without their debit.
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job j WHERE j.id BETWEEN $1 AND $2
		AND (j.state IN ('retryable', 'discarded', 'cancelled') OR j.state = 'completed' AND NOT EXISTS (
		SELECT 1 FROM wallet_transactions t WHERE t.idempotency_key =
			`+wallet.SQLFundingKey("(j.args->>'marquee_id')", "(j.args->>'day')")+`))`, lo, hi).Scan(&r.Errors); err != nil {
		return nil, err
	}
	// The backlog's rest goes, and so do the fund_day jobs the workers'
	// start-up sweep enqueued for Marquee-days that completed while it paged
	// (completed jobs do not block a new one; a second run is a no-op).
	if _, err := env.Pool.Exec(ctx, `DELETE FROM river_job WHERE id > $1 AND kind = 'fund_day'
		AND state IN ('available', 'pending', 'scheduled', 'retryable')`, lastJob); err != nil {
		return nil, err
	}
	r.Note("processes", k)
	r.Note("concurrency", "funding workers (MaxWorkers x processes)")
	r.Note("backlog", len(marquees))
	r.Note("latency", "fetched (attempted_at) to completed (finalized_at), from river_job")
	if left == 0 {
		r.Note("backlog_drained", "the backlog ran out before the window ended: raise --marquees")
		env.Progressf("funding: warning: the backlog ran out after %.1fs; raise --marquees", r.Seconds)
	}
	env.Progressf("funding: %d process(es): %.0f jobs/s, PostgreSQL %v commits/s", k, r.OpsPerSec, r.Notes["pg_commits_per_sec"])
	return r, nil
}

// webhooksProcesses measures signed Stripe deliveries/s through K real
// `billing web` processes for each K in procs: the same env.Clients
// closed-loop clients, client i delivering to process i mod K. baseline
// runs the pgbench claim+enqueue baseline again and returns the mean with
// the one run before.
func webhooksProcesses(ctx context.Context, env Env, plan *scalePlan, secret, run string, orders []*fulfillment.Order,
	dupRatio float64, baseline func() (*Report, error)) (*Report, error) {
	var rows []*Report
	for _, k := range plan.counts {
		r, err := plan.measure(env, "webhooks", k, func(attempt int) (*Report, error) {
			// Event ids must be new in every attempt.
			return webhooksWithProcesses(ctx, env, k, secret, fmt.Sprintf("%s_p%d_a%d", run, k, attempt), orders, dupRatio)
		})
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	base, err := baseline()
	if err != nil {
		return nil, err
	}
	return scaleReport(env, "webhooks", "deliveries", rows, map[string]*Report{"pgbench_claim_enqueue": base}), nil
}

func webhooksWithProcesses(ctx context.Context, env Env, k int, secret, run string, orders []*fulfillment.Order, dupRatio float64) (*Report, error) {
	addrs := make([]string, k)
	for i := range addrs {
		var err error
		if addrs[i], err = procs.FreeAddr(); err != nil {
			return nil, err
		}
	}
	env.Progressf("webhooks: starting %d `billing web` process(es)", k)
	g, err := startProcs(env.Billing, "web", k, func(i int) []string {
		return append(childEnv(env, "web", i), "BILLING_HTTP_ADDR="+addrs[i], "BILLING_STRIPE_WEBHOOK_SECRET="+secret)
	})
	if err != nil {
		return nil, err
	}
	defer g.stop() //nolint:errcheck // the measured path stops them itself
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: env.Clients * 2, MaxIdleConnsPerHost: env.Clients * 2}}
	urls := make([]string, k)
	for i, addr := range addrs {
		urls[i] = "http://" + addr + "/webhooks/stripe"
		if err := g.waitHealthy(ctx, hc, i, "http://"+addr+"/healthz"); err != nil {
			return nil, err
		}
	}
	d := &deliverer{urls: urls, secret: secret, run: run, orders: orders,
		dupRatio: dupRatio, http: hc, sent: make([][][]byte, env.Clients)}
	env.Progressf("webhooks: warm-up: 1s of deliveries")
	Load(ctx, "warmup", env.Clients, time.Second, d.op)
	d.claimed.Store(0)
	d.duplicates.Store(0)
	env.Progressf("webhooks: %d process(es), %d clients, %s", k, env.Clients, env.Duration)
	watch, err := watchPG(ctx, env.Pool, g.pids())
	if err != nil {
		return nil, err
	}
	r := Load(ctx, fmt.Sprintf("webhooks_%d_processes", k), env.Clients, env.Duration, d.op)
	if err := watch.finish(ctx, r, time.Now()); err != nil {
		return nil, err
	}
	if err := g.exited(); err != nil {
		return nil, err
	}
	if err := g.stop(); err != nil {
		return nil, err
	}
	r.Note("processes", k)
	r.Note("concurrency", "clients")
	r.Note("claimed", d.claimed.Load())
	r.Note("duplicates", d.duplicates.Load())
	env.Progressf("webhooks: %d process(es): %.0f deliveries/s, PostgreSQL %v commits/s", k, r.OpsPerSec, r.Notes["pg_commits_per_sec"])
	return r, nil
}

// waitHealthy waits up to 60s for the i-th (web) process's /healthz.
func (g *procGroup) waitHealthy(ctx context.Context, hc *http.Client, i int, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := procs.WaitHealthy(ctx, hc, u, g.procs[i]); err != nil {
		return fmt.Errorf("bench: %w:\n%s", err, g.logs[i])
	}
	return nil
}
