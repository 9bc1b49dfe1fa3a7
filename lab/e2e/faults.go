package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// injectFaults kills a random worker with SIGKILL every WorkerKillEvery
// (jittered) and restarts it a moment later; one third of the way in it
// kills a web process, halfway it restarts PostgreSQL with
// `pg_ctl restart -m fast`, and at 60% the payment providers go down for
// ProviderDownFor. Everything must reconnect by itself.
func (r *Run) injectFaults(ctx context.Context) {
	if r.opts.Failover {
		r.injectFailovers(ctx)
		return
	}
	go r.terminateBackends(ctx)
	rng := rand.New(rand.NewPCG(uint64(r.opts.Seed), 0xfa17))
	start := time.Now()
	webKilled, pgRestarted, providersDown := false, false, false
	next := r.jitter(rng)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		elapsed := time.Since(start)
		if !webKilled && elapsed > r.opts.Duration/3 {
			webKilled = true
			r.killAndRestart(ctx, pick(rng, r.webs), 500*time.Millisecond)
			r.faults.mu.Lock()
			r.faults.webKills++
			r.faults.mu.Unlock()
		}
		if !pgRestarted && elapsed > r.opts.Duration/2 {
			pgRestarted = true
			r.restartPostgres()
		}
		if !providersDown && elapsed > r.opts.Duration*3/5 {
			providersDown = true
			go r.providerOutage(ctx)
		}
		if elapsed >= next {
			next = elapsed + r.jitter(rng)
			r.killAndRestart(ctx, pick(rng, r.workers), time.Duration(200+rng.IntN(800))*time.Millisecond)
			r.faults.mu.Lock()
			r.faults.workerKills++
			r.faults.mu.Unlock()
		}
	}
}

func (r *Run) jitter(rng *rand.Rand) time.Duration {
	base := r.opts.WorkerKillEvery
	return base/2 + time.Duration(rng.Int64N(int64(base)))
}

// providerOutage takes every payment provider's API down for at least
// ProviderDownFor and until a call has met the outage (or the load ends):
// checkouts then answer 503 with Retry-After and the SDK retries them with
// the same key. On a busy machine, recovering from the PostgreSQL restart
// just before, the load may send no checkout for longer than the
// outage's own length, and the fault would test nothing.
func (r *Run) providerOutage(ctx context.Context) {
	r.logf("fault: payment providers down for %v, and until a call is refused", r.opts.ProviderDownFor)
	refused := r.providers.Refused()
	r.providers.SetDown(true)
	sleepCtx(context.WithoutCancel(ctx), r.opts.ProviderDownFor)
	for r.providers.Refused() == refused && ctx.Err() == nil {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	r.providers.SetDown(false)
	r.faults.mu.Lock()
	r.faults.providerOutages++
	r.faults.mu.Unlock()
	r.logf("payment providers back (%d calls refused)", r.providers.Refused()-refused)
}

// killAndRestart SIGKILLs p and starts it again after down.
func (r *Run) killAndRestart(ctx context.Context, p *Proc, down time.Duration) {
	r.logf("fault: kill -9 %s", p.Name)
	p.Kill()
	r.restarts.Add(1)
	go func() {
		defer r.restarts.Done()
		sleepCtx(context.WithoutCancel(ctx), down)
		if err := p.Start(); err != nil {
			r.logf("restart %s: %v", p.Name, err)
		}
	}()
}

func (r *Run) restartPostgres() {
	r.logf("fault: pg_ctl restart -m fast")
	t0 := time.Now()
	if err := r.pg.Restart(); err != nil {
		r.logf("postgres restart failed: %v", err)
		fmt.Fprintf(r.opts.Out, "chaos: postgres restart failed: %v\n", err)
		return
	}
	r.faults.mu.Lock()
	r.faults.pgRestarts++
	r.faults.mu.Unlock()
	r.logf("postgres back after %v", time.Since(t0))
}

// terminateBackends cuts one random busy database session of the system
// under test every few hundred milliseconds (pg_terminate_backend): a
// statement or transaction dies mid-flight wherever it is, in intake, the
// API or a worker, which is what exposes work that is not atomic (say, a
// webhook claim committed before its fulfillment job is enqueued). The
// harness's own sessions are spared.
func (r *Run) terminateBackends(ctx context.Context) {
	rng := rand.New(rand.NewPCG(uint64(r.opts.Seed), 0xdead))
	for {
		sleepCtx(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		var killed bool
		err := r.pool.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM (
			SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend'
			  AND pid <> pg_backend_pid() AND application_name <> $1
			  AND state IN ('active', 'idle in transaction')
			ORDER BY random() LIMIT 1) s`, harnessAppName).Scan(&killed)
		if err == nil && killed {
			r.faults.mu.Lock()
			r.faults.backendKills++
			r.faults.mu.Unlock()
		}
	}
}
