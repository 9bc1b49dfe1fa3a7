package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

func init() {
	Register(&Benchmark{
		Name:  "funding",
		Short: "fund_day jobs worked per second by a River client, beside River's no-op job and the wallet's distinct debits; and a sweep of many Marquees",
		Flags: func(fs *pflag.FlagSet) {
			fs.Int("marquees", 10_000, "Marquees (one per player) whose fund_day jobs are enqueued and worked")
			fs.Int("sweep-marquees", 100_000, "Marquees the timed sweep pages through and enqueues (0 skips it)")
			fs.Int("max-workers", 0, "River MaxWorkers of the measured queue, for both fund_day and no-op (0: the worker process's, jobs.Queues)")
			fs.Int("rounds", 3, "rounds alternating the four measurements (each gets marquees/rounds jobs, duration/rounds)")
			fs.Duration("fetch-cooldown", 0, "River FetchCooldown of the measured queue, for both (0: the worker process's, jobs.Queues)")
			processesFlag(fs, "worker")
			ownersFlag(fs)
		},
		Run: runFunding,
	})
}

// fundingPrice is each bench Marquee's daily price; the wallet baseline
// debits 1 Spark at a time from the same players.
const fundingPrice = 100

func runFunding(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error) {
	n, _ := fs.GetInt("marquees")
	sweepN, _ := fs.GetInt("sweep-marquees")
	rounds, _ := fs.GetInt("rounds")
	qc := queueConfig{}
	qc.MaxWorkers, _ = fs.GetInt("max-workers")
	qc.FetchCooldown, _ = fs.GetDuration("fetch-cooldown")
	// Measure what the worker process runs unless told otherwise.
	if prod := jobs.Queues()[jobs.QueueFunding]; qc.FetchCooldown == 0 {
		qc.FetchCooldown = prod.FetchCooldown
	}
	// The no-op baseline runs with the funding queue's settings too (not
	// the default queue's): same workers, same cooldown.
	qc = queueConfig(qc.resolve(jobs.QueueFunding))
	if n <= 0 || rounds <= 0 || n < rounds {
		return nil, fmt.Errorf("bench funding: --marquees and --rounds must be positive, marquees >= rounds")
	}
	owners, err := ownersOf(fs, n)
	if err != nil {
		return nil, err
	}
	if plan, err := processCounts(fs); err != nil || plan != nil {
		if err != nil {
			return nil, err
		}
		if owners < n {
			return nil, fmt.Errorf("bench funding: --owners is measured in one process; drop --processes")
		}
		return runFundingProcesses(ctx, env, plan, n)
	}
	env.Progressf("funding: creating %d players and Marquees", n)
	run := time.Now().UnixNano()
	w := env.Wallet
	players, marquees, err := seedFunding(ctx, env, w, n, run)
	if err != nil {
		return nil, err
	}
	// The direct fundings get Marquees of their own: paying later days of
	// the River runs' Marquees would turn their jobs into fast paths.
	directMarquees, err := addMarquees(ctx, env.Pool, players)
	if err != nil {
		return nil, err
	}
	// With --owners, the measured jobs are Marquees of few players and the
	// one-Marquee-per-player jobs above become the baseline funding_spread.
	var spread []int64
	if owners < n {
		env.Progressf("funding: %d more Marquees over %d owners", n, owners)
		spread = marquees
		if marquees, err = seedOwners(ctx, env, w, n, owners, run); err != nil {
			return nil, err
		}
	}
	f := &fundingRun{env: env, qc: qc, wallet: w, players: players, run: run,
		day: enforcer.ServiceDay(time.Now(), env.TZ), logger: slog.New(slog.DiscardHandler)}
	// Rounds alternate the four measurements, so that the load of a shared
	// machine, which drifts over seconds, falls on all of them alike.
	measured := map[string]*series{}
	for _, name := range []string{"funding", "funding_spread", "river_noop", "wallet_debit_distinct", "funding_direct"} {
		measured[name] = &series{}
	}
	for r := range rounds {
		chunk := marquees[r*n/rounds : (r+1)*n/rounds]
		env.Progressf("funding: round %d of %d: %d no-op jobs, %d fund_day jobs, %v of wallet debits, %v of direct fundings",
			r+1, rounds, len(chunk), len(chunk), env.Duration/time.Duration(rounds), env.Duration/time.Duration(rounds))
		steps := []struct {
			name string
			run  func() (*Report, error)
		}{
			{"river_noop", func() (*Report, error) { return f.noop(ctx, len(chunk)) }},
			{"funding", func() (*Report, error) { return f.fundDays(ctx, chunk) }},
			{"wallet_debit_distinct", func() (*Report, error) { return f.walletDebits(ctx, rounds), nil }},
			{"funding_direct", func() (*Report, error) { return f.direct(ctx, directMarquees, rounds), nil }},
		}
		if spread != nil {
			spreadChunk := spread[r*n/rounds : (r+1)*n/rounds]
			steps = append(steps, struct {
				name string
				run  func() (*Report, error)
			}{"funding_spread", func() (*Report, error) { return f.fundDays(ctx, spreadChunk) }})
		}
		for _, st := range steps {
			rep, err := st.run()
			if err != nil {
				return nil, err
			}
			measured[st.name].add(rep)
		}
	}
	report := measured["funding"].report("funding")
	var funded int64
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = ANY(
		SELECT `+wallet.SQLFundingKey("m", "$2::text")+` FROM unnest($1::bigint[]) m)`, marquees, f.day).Scan(&funded); err != nil {
		return nil, err
	}
	report.Errors += int64(n) - funded
	for _, name := range []string{"river_noop", "wallet_debit_distinct", "funding_direct"} {
		report.AddBaseline(name, measured[name].report(name))
	}
	if spread != nil {
		report.AddBaseline("funding_spread", measured["funding_spread"].report("funding_spread"))
		report.Note("owners", owners)
	}
	report.Note("marquees", n)
	report.Note("rounds", rounds)
	report.Note("max_workers", qc.resolve(jobs.QueueFunding).MaxWorkers)
	report.Note("fetch_cooldown", qc.FetchCooldown.String())
	report.Note("percentiles", "p50: median of the rounds' p50s; p99: the worst round's")
	// Stop the bench's Marquees: a later sweep (or worker) must not fund them.
	if _, err := env.Pool.Exec(ctx, `UPDATE marquees SET desired_state = 'stopped', status = 'stopped'
		WHERE id = ANY($1) OR id = ANY($2) OR id = ANY($3)`, marquees, directMarquees, spread); err != nil {
		return nil, err
	}
	if sweepN > 0 {
		if err := benchSweep(ctx, env, sweepN, f.logger, report); err != nil {
			return nil, err
		}
	}
	return report, nil
}

// fundingRun holds what the measurements of one invocation share.
type fundingRun struct {
	env     Env
	qc      queueConfig
	wallet  *wallet.Store
	players []int64
	run     int64
	day     string
	logger  *slog.Logger
	seq     atomic.Int64 // distinct keys across rounds
	// days numbers direct's Marquee-days across rounds on its own, so that
	// each Marquee's days follow one another: a day is paid only once the
	// day before it is (enforcer.OutcomeNotDue).
	days atomic.Int64
}

func (f *fundingRun) noop(ctx context.Context, n int) (*Report, error) {
	args := make([]river.InsertManyParams, n)
	for i := range args {
		args[i] = river.InsertManyParams{Args: jobs.NoopArgs{}}
	}
	return workJobs(ctx, f.env, "river_noop", func(*pgxpool.Pool) *river.Workers {
		workers := river.NewWorkers()
		jobs.RegisterNoop(workers)
		return workers
	}, jobs.QueueDefault, f.qc, args, f.logger)
}

func (f *fundingRun) fundDays(ctx context.Context, marquees []int64) (*Report, error) {
	args := make([]river.InsertManyParams, len(marquees))
	for i, id := range marquees {
		args[i] = river.InsertManyParams{Args: enforcer.FundDayArgs{MarqueeID: id, Day: f.day}}
	}
	return workJobs(ctx, f.env, "funding", func(pool *pgxpool.Pool) *river.Workers {
		workers := river.NewWorkers()
		// The store posts inside the service's transactions, on pool.
		svc := enforcer.New(pool, f.wallet, enforcer.Options{TZ: f.env.TZ, Logger: f.logger})
		enforcer.Register(workers, enforcer.WorkerOptions{Service: svc})
		return workers
	}, jobs.QueueFunding, f.qc, args, f.logger)
}

// walletDebits debits 1 Spark from distinct players' wallets in turn.
func (f *fundingRun) walletDebits(ctx context.Context, rounds int) *Report {
	return Load(ctx, "wallet_debit_distinct", f.env.Clients, f.env.Duration/time.Duration(rounds), func(ctx context.Context, _ int, _ int64) error {
		i := f.seq.Add(1)
		_, err := f.wallet.Debit(ctx, wallet.PostParams{PlayerID: f.players[i%int64(len(f.players))], Currency: wallet.Sparks,
			Amount: 1, Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("bench:%d:debit:%d", f.run, i))})
		return err
	})
}

// direct is the funding transaction without River: FundDay on distinct
// Marquee-days, day after day.
func (f *fundingRun) direct(ctx context.Context, marquees []int64, rounds int) *Report {
	tz := f.env.TZ
	svc := enforcer.New(f.env.Pool, f.wallet, enforcer.Options{TZ: tz, Logger: f.logger})
	first, _, _ := enforcer.DayBounds(f.day, tz)
	return Load(ctx, "funding_direct", f.env.Clients, f.env.Duration/time.Duration(rounds), func(ctx context.Context, _ int, _ int64) error {
		i := f.days.Add(1) - 1
		day := enforcer.ServiceDay(first.AddDate(0, 0, int(i/int64(len(marquees)))).Add(time.Hour), tz)
		res, err := svc.FundDay(ctx, enforcer.FundDayArgs{MarqueeID: marquees[i%int64(len(marquees))], Day: day})
		if err == nil && res.Outcome != enforcer.OutcomeFunded {
			err = fmt.Errorf("outcome %s", res.Outcome)
		}
		return err
	})
}

// series adds up the rounds of one measurement.
type series struct {
	clients    int
	ops, errs  int64
	seconds    float64
	p50s, p99s []float64
}

func (s *series) add(r *Report) {
	s.clients = r.Clients
	s.ops += r.Ops
	s.errs += r.Errors
	s.seconds += r.Seconds
	s.p50s = append(s.p50s, r.P50ms)
	s.p99s = append(s.p99s, r.P99ms)
}

func (s *series) report(name string) *Report {
	r := &Report{Name: name, Clients: s.clients, Seconds: round(s.seconds), Ops: s.ops, Errors: s.errs}
	if s.seconds > 0 {
		r.OpsPerSec = round(float64(s.ops) / s.seconds)
	}
	sort.Float64s(s.p50s)
	r.P50ms = s.p50s[len(s.p50s)/2]
	r.P99ms = slices.Max(s.p99s)
	return r
}

// addMarquees gives each player one more Marquee.
func addMarquees(ctx context.Context, pool *pgxpool.Pool, players []int64) ([]int64, error) {
	rows, err := pool.Query(ctx, `INSERT INTO marquees (player_id, name, plan, daily_price)
		SELECT p, 'bench', 'bench', $2 FROM unnest($1::bigint[]) p RETURNING id`, players, fundingPrice)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// seedFunding creates n players, each with enough Sparks and one Marquee.
func seedFunding(ctx context.Context, env Env, w *wallet.Store, n int, run int64) (players, marquees []int64, err error) {
	rows, err := env.Pool.Query(ctx, `INSERT INTO players (name) SELECT 'bench-funding' FROM generate_series(1, $1) RETURNING id`, n)
	if err != nil {
		return nil, nil, err
	}
	if players, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return nil, nil, err
	}
	if marquees, err = addMarquees(ctx, env.Pool, players); err != nil {
		return nil, nil, err
	}
	// Credits go through the wallet (the ledger stays auditable), in parallel.
	errs := make(chan error, env.Clients*2)
	next := make(chan int64)
	go func() {
		defer close(next)
		for _, p := range players {
			select {
			case next <- p:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range env.Clients * 2 {
		go func() {
			var err error
			for p := range next {
				if err == nil {
					_, err = w.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 100_000,
						Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("bench:%d:seed:%d", run, p))})
				}
			}
			errs <- err
		}()
	}
	for range env.Clients * 2 {
		if e := <-errs; e != nil && err == nil {
			err = fmt.Errorf("bench funding: seed credit: %w", e)
		}
	}
	return players, marquees, err
}

// queueConfig is the River queue configuration both measured runs share.
type queueConfig river.QueueConfig

// resolve fills MaxWorkers from the worker process's configuration of queue.
func (q queueConfig) resolve(queue string) river.QueueConfig {
	c := river.QueueConfig(q)
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = jobs.Queues()[queue].MaxWorkers
	}
	return c
}

// workJobs inserts args in one transaction, then measures a River client
// working all of them on queue: jobs/s from the insert's commit to the last
// completion; p50/p99 are time in Work.
func workJobs(ctx context.Context, env Env, name string, workers func(*pgxpool.Pool) *river.Workers, queue string, qc queueConfig, args []river.InsertManyParams, logger *slog.Logger) (*Report, error) {
	cfg := qc.resolve(queue)
	var waiting int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1
		AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`, queue).Scan(&waiting); err != nil {
		return nil, err
	}
	if waiting > 0 {
		return nil, fmt.Errorf("bench %s: queue %q already holds %d unfinished jobs: use a scratch database", name, queue, waiting)
	}
	// A pool of its own, sized so that no worker waits for a connection.
	pcfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(cfg.MaxWorkers + 10)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	client, err := jobs.NewClient(pool, jobs.Options{Logger: logger, Workers: workers(pool), ID: "bench-" + name,
		Queues: map[string]river.QueueConfig{queue: cfg}})
	if err != nil {
		return nil, err
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: len(args) + 100,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled}})
	defer cancel()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer jobs.Stop(context.WithoutCancel(ctx), client, 10*time.Second) //nolint:errcheck // best effort after the measurement
	if err := insertAll(ctx, pool, client, args); err != nil {
		return nil, err
	}
	start := time.Now()
	lat := make([]time.Duration, 0, len(args))
	var errs int64
	timeout := time.After(10 * time.Minute)
	for done := 0; done < len(args); done++ {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				errs++
				continue
			}
			lat = append(lat, ev.JobStats.RunDuration)
		case <-timeout:
			return nil, fmt.Errorf("bench %s: %d of %d jobs done after 10 minutes", name, done, len(args))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return Summarize(name, cfg.MaxWorkers, time.Since(start), [][]time.Duration{lat}, errs), nil
}

func insertAll(ctx context.Context, pool *pgxpool.Pool, client *jobs.Client, args []river.InsertManyParams) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := 0; i < len(args); i += 1000 {
			if _, err := client.InsertManyFastTx(ctx, tx, args[i:min(i+1000, len(args))]); err != nil {
				return fmt.Errorf("bench: insert jobs: %w", err)
			}
		}
		return nil
	})
}

// benchSweep times one sweep of n fresh, unpaid Marquees through an
// insert-only client, then removes them and their jobs.
func benchSweep(ctx context.Context, env Env, n int, logger *slog.Logger, report *Report) error {
	env.Progressf("funding: sweeping %d Marquees", n)
	var player, lo, hi int64
	if err := env.Pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('bench-sweep') RETURNING id`).Scan(&player); err != nil {
		return err
	}
	if err := env.Pool.QueryRow(ctx, `WITH m AS (INSERT INTO marquees (player_id, name, plan, daily_price)
		SELECT $1, 'sweep', 'bench', $3 FROM generate_series(1, $2) RETURNING id) SELECT min(id), max(id) FROM m`,
		player, n, fundingPrice).Scan(&lo, &hi); err != nil {
		return err
	}
	if _, err := env.Pool.Exec(ctx, `ANALYZE marquees`); err != nil {
		return err
	}
	var lastJob int64
	if err := env.Pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&lastJob); err != nil {
		return err
	}
	client, err := jobs.NewClient(env.Pool, jobs.Options{Logger: logger})
	if err != nil {
		return err
	}
	svc := enforcer.New(env.Pool, nil, enforcer.Options{TZ: env.TZ, Logger: logger})
	res, err := svc.Sweep(ctx, client, enforcer.SweepOptions{})
	if err != nil {
		return err
	}
	report.Note("sweep_marquees", n)
	report.Note("sweep_seen", res.Seen)
	report.Note("sweep_enqueued", res.Enqueued)
	report.Note("sweep_seconds", round(res.Took.Seconds()))
	report.Note("sweep_marquees_per_sec", round(float64(res.Seen)/res.Took.Seconds()))
	// Leave the scratch database as it was: a worker must not fund these,
	// nor any other due Marquee the sweep found.
	if _, err := env.Pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'fund_day' AND state = 'available'
		AND id > $1`, lastJob); err != nil {
		return err
	}
	_, err = env.Pool.Exec(ctx, `DELETE FROM marquees WHERE id BETWEEN $1 AND $2`, lo, hi)
	return err
}
