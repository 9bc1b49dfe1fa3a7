package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/dev/formation"
	"github.com/fibe-dev/billing/internal/dev/procs"
)

// failoverRun is what a failover run (Options.Failover) adds to a Run:
// the formation under it, the history of the workload's operations, the
// write probe, the web and worker processes' metrics, and what each
// fault did.
type failoverRun struct {
	f       *formation.Formation
	history *history
	probe   *probe
	metrics []string // each billing process's metrics address
	scraped scrapes

	mu      sync.Mutex
	faults  []*FaultResult
	rejoins sync.WaitGroup // lost nodes on their way back as standbys
}

// FaultResult is one fault of a failover run and what the system did.
type FaultResult struct {
	Name string
	// WritesBack is the time from the fault to the first write acknowledged
	// after it (the probe's); Answered503 how many requests billing
	// answered 503 meanwhile (API and webhook intake, every process).
	WritesBack  time.Duration
	Answered503 int64
	// Promoted is the time from the fault to the monitor's new primary
	// taking writes (reported and assigned wait_primary or primary);
	// Rejoined covers the rest, until a standby has caught up with it.
	Promoted time.Duration
	// Cancelled counts the commits whose synchronous-replication wait the
	// fault cancelled (the cancel fault only).
	Cancelled int
	// OldPrimary and NewPrimary name the nodes (a failover's).
	OldPrimary, NewPrimary string
	// Rejoined is how long the lost nodes took to be standbys again.
	Rejoined time.Duration
}

func (r *Run) failoverDefaults() {
	if r.opts.Workers == 0 {
		r.opts.Workers = 2
	}
	if r.opts.Failovers == 0 {
		r.opts.Failovers = 1
	}
}

// startFormation starts the formation the run's processes connect to.
func (r *Run) startFormation(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f, err := formation.Start(sctx, formation.Options{Dir: filepath.Join(r.opts.Dir, "formation"),
		Timeouts: formation.TestTimeouts, Fast: true})
	if err != nil {
		return err
	}
	r.fo = &failoverRun{f: f, history: newHistory()}
	r.dbURL = f.URL()
	fmt.Fprintf(r.opts.Out, "chaos: formation up: %s\n", r.dbURL)
	return nil
}

// watchMetrics gives each billing process a metrics listener, so the run
// can count the 503s they answer and the commits they refused.
func (r *Run) watchMetrics(ps []*Proc) error {
	for _, p := range ps {
		addr, err := procs.FreeAddr()
		if err != nil {
			return err
		}
		p.SetEnv("BILLING_METRICS_ADDR=" + addr)
		r.fo.metrics = append(r.fo.metrics, addr)
	}
	return nil
}

// injectFailovers runs the failover faults, each once per cycle
// (Options.Failovers cycles), each followed by writes acknowledged again
// and the formation whole again before the next.
func (r *Run) injectFailovers(ctx context.Context) {
	r.fo.probe = startProbe(ctx, r)
	defer r.fo.probe.stop()
	faults := []struct {
		name string
		do   func(context.Context) (*FaultResult, error)
	}{
		{"kill -9 of the primary's machine", r.killPrimary},
		{"pg_cancel_backend of the commits waiting for the standbys", r.cancelSyncWaits},
		{"SIGSTOP of the primary, resumed once a new primary took writes", r.freezePrimary},
		{"kill -9 of a standby, then of the primary", r.killStandbyThenPrimary},
	}
	sleepCtx(ctx, 3*time.Second) // the load is flowing
	for cycle := range r.opts.Failovers {
		for _, fault := range faults {
			if ctx.Err() != nil {
				return
			}
			r.logf("fault (cycle %d): %s", cycle+1, fault.name)
			res, err := fault.do(ctx)
			if err != nil {
				r.logf("fault %s: %v", fault.name, err)
				fmt.Fprintf(r.opts.Out, "chaos: fault %q: %v\n", fault.name, err)
			}
			r.fo.mu.Lock() // the rejoin may be writing res already
			res.Name = fault.name + res.Name
			if err != nil {
				res.Name += " (FAILED: " + err.Error() + ")"
			}
			r.fo.faults = append(r.fo.faults, res)
			back, answered := res.WritesBack, res.Answered503
			r.fo.mu.Unlock()
			fmt.Fprintf(r.opts.Out, "chaos: %s: writes back after %v, %d answered 503\n", fault.name,
				back.Round(100*time.Millisecond), answered)
			sleepCtx(ctx, time.Second)
		}
	}
}

// faultTimeout bounds each of: one fault (the failover and writes back),
// the rejoin of the nodes it lost, and the wait for the formation to be
// whole before the next: writes came back a minute after a killed
// primary at load 34 on two cores, and at load 50 one was still
// mid-promotion (wait_primary, its standby joining) after three.
const faultTimeout = 6 * time.Minute

// whole waits, under a bound of its own (faultTimeout), for the formation
// to be whole before a fault: the last fault's lost nodes back as
// standbys, a rejoin timed and bounded on its own too (timeRejoin). The
// fault's own bound starts when the fault does, so that a slow rejoin
// (a diverged former primary rewound, on a starved machine) does not eat
// the time the next failover is given.
func (r *Run) whole(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, faultTimeout)
	defer cancel()
	return r.fo.f.WaitHealthy(ctx)
}

// loss is how a fault loses the primary.
type loss struct {
	how func(primary *formation.Node) error
	// before loses other nodes first (they come back with the primary).
	before func(ctx context.Context) ([]*formation.Node, error)
	// revive brings those back this long after the primary is lost, while
	// the formation waits: with two of three data nodes gone,
	// pg_auto_failover promotes nobody (a new primary must have a
	// synchronous standby), so writes wait for one of them.
	revive time.Duration
	// resume is done to the old primary once writes are back (a frozen
	// primary thawed, a zombie beside its successor).
	resume func(primary *formation.Node) error
}

// lose waits for the formation to be whole (the last fault's nodes back:
// pg_auto_failover promotes nobody without a standby for the new primary),
// loses the primary as l says, waits for a new primary and the first write
// acknowledged after the loss, then brings every lost node back; their
// rejoin is timed in the background, while the next fault begins.
func (r *Run) lose(ctx context.Context, l loss) (res *FaultResult, err error) {
	res = &FaultResult{}
	if err := r.whole(ctx); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, faultTimeout)
	defer cancel()
	f := r.fo.f
	primary, err := f.Primary(ctx)
	if err != nil || primary == nil {
		return res, fmt.Errorf("no primary before the fault: %v", err)
	}
	res.OldPrimary = primary.Name
	var lost []*formation.Node
	// A fault that fails still brings back what it lost, so that the
	// faults after it find a formation that can become whole, and the run
	// reports on them rather than on this one's leftovers.
	defer func() {
		if err != nil {
			_ = primary.Thaw()
			r.startLost(append(lost, primary))
		}
	}()
	if l.before != nil {
		if lost, err = l.before(ctx); err != nil {
			return res, err
		}
	}
	base := r.scrape(ctx)
	sent := time.Now()
	if err := l.how(primary); err != nil {
		return res, err
	}
	// From here on the primary is gone: what it acknowledged while being
	// stopped or killed does not count as writes being back. The times
	// are counted from when the loss began: on a busy machine a kill can
	// take seconds to be done (its processes reaped), and a new primary
	// may be taking writes by then.
	at := time.Now()
	r.logf("fault: %s lost (the loss took %v)", primary.Name, at.Sub(sent).Round(time.Millisecond))
	if l.revive > 0 {
		go func() {
			sleepCtx(ctx, l.revive)
			r.startLost(lost)
		}()
	}
	next, err := f.WaitPrimary(ctx, primary)
	if err != nil {
		return res, err
	}
	res.NewPrimary, res.Promoted = next.Name, time.Since(sent)
	if res.WritesBack, err = r.fo.probe.writesBack(ctx, at); err != nil {
		return res, err
	}
	res.WritesBack += at.Sub(sent)
	res.Answered503 = r.scrape(ctx).answered503 - base.answered503
	r.logf("fault: %s is the primary; writes back %v after the loss", next.Name, res.WritesBack)
	if l.resume != nil {
		sleepCtx(ctx, 2*time.Second) // a zombie beside a new primary, for a while
		if err := l.resume(primary); err != nil {
			return res, err
		}
	}
	r.startLost(append(lost, primary))
	r.timeRejoin(ctx, res)
	return res, nil
}

// timeRejoin records in res how long the formation takes to be whole again.
func (r *Run) timeRejoin(ctx context.Context, res *FaultResult) {
	start := time.Now()
	r.fo.rejoins.Add(1)
	go func() {
		defer r.fo.rejoins.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultTimeout)
		defer cancel()
		err := r.fo.f.WaitHealthy(ctx)
		r.fo.mu.Lock()
		defer r.fo.mu.Unlock()
		res.Rejoined = time.Since(start)
		if err != nil {
			res.Name += " (FAILED to rejoin: " + err.Error() + ")"
		}
	}()
}

// startLost starts every node of lost that is not running.
func (r *Run) startLost(lost []*formation.Node) {
	for _, n := range lost {
		if !n.Running() {
			r.logf("fault: %s back", n.Name)
			if err := n.Start(); err != nil {
				r.logf("start %s: %v", n.Name, err)
			}
		}
	}
}

func (r *Run) killPrimary(ctx context.Context) (*FaultResult, error) {
	return r.lose(ctx, loss{how: (*formation.Node).Kill})
}

// freezePrimary stops the primary's machine (SIGSTOP): its connections
// stay open and unanswered while a standby is promoted. Once writes are
// acknowledged on the new primary it is resumed, a zombie that believes
// itself primary until its keeper learns otherwise: whatever it still
// does must not be acknowledged (its commits wait for standbys that now
// follow the new primary).
func (r *Run) freezePrimary(ctx context.Context) (*FaultResult, error) {
	return r.lose(ctx, loss{how: (*formation.Node).Freeze, resume: (*formation.Node).Thaw})
}

// killStandbyThenPrimary loses a standby, then, with one standby left
// for synchronous replication, the primary; the standby comes back a few
// seconds later, and only then can a new primary be chosen.
func (r *Run) killStandbyThenPrimary(ctx context.Context) (*FaultResult, error) {
	return r.lose(ctx, loss{how: (*formation.Node).Kill, revive: 5 * time.Second,
		before: func(ctx context.Context) ([]*formation.Node, error) {
			standbys, err := r.fo.f.Standbys(ctx)
			if err != nil || len(standbys) == 0 {
				return nil, fmt.Errorf("no standby to kill: %v", err)
			}
			s := standbys[rand.IntN(len(standbys))]
			r.logf("fault: kill -9 standby %s", s.Name)
			if err := s.Kill(); err != nil {
				return nil, err
			}
			sleepCtx(ctx, 2*time.Second)
			return []*formation.Node{s}, nil
		}})
}

// cancelSyncWaits makes commits wait for the standbys (the primary's WAL
// senders are stopped for a moment), cancels every session of the
// billing database waiting on SyncRep, as pg_auto_failover's keeper does
// when it turns synchronous replication off, then lets replication go
// on. Each cancelled commit is applied on the primary but must not be
// acknowledged.
func (r *Run) cancelSyncWaits(ctx context.Context) (*FaultResult, error) {
	res := &FaultResult{}
	// The last fault's node may still be rejoining, its primary in
	// wait_primary, where commits wait for no standby: there would be no
	// wait to cancel.
	if err := r.whole(ctx); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, faultTimeout)
	defer cancel()
	primary, err := r.fo.f.Primary(ctx)
	if err != nil || primary == nil {
		return res, fmt.Errorf("no primary: %v", err)
	}
	res.OldPrimary, res.NewPrimary = primary.Name, primary.Name
	conn, err := pgx.Connect(ctx, primary.AdminURL())
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var senders []int
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_replication`)
	if err == nil {
		senders, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	if err != nil || len(senders) == 0 {
		return res, fmt.Errorf("no WAL sender on %s: %v", primary.Name, err)
	}
	base := r.scrape(ctx)
	at := time.Now()
	signal(senders, syscall.SIGSTOP)
	res.Cancelled = cancelWaiting(ctx, conn, 2*time.Second)
	signal(senders, syscall.SIGCONT)
	res.WritesBack, err = r.fo.probe.writesBack(ctx, at)
	res.Answered503 = r.scrape(ctx).answered503 - base.answered503
	return res, err
}

func signal(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// cancelWaiting cancels every session of the database waiting for
// synchronous replication, for d and then until it has cancelled one (or
// ctx ends: a light load may take a while to commit), and returns how many
// waits it cancelled (a session still shown waiting on the next look, its
// cancel not yet acted on, counts once).
func cancelWaiting(ctx context.Context, conn *pgx.Conn, d time.Duration) int {
	type wait struct {
		pid   int
		since time.Time
	}
	seen := map[wait]bool{}
	for end := time.Now().Add(d); (time.Now().Before(end) || len(seen) == 0) && ctx.Err() == nil; {
		rows, err := conn.Query(ctx, `SELECT pid, coalesce(xact_start, query_start, now()) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'SyncRep' AND pg_cancel_backend(pid)`)
		if err == nil {
			var w wait
			_, _ = pgx.ForEachRow(rows, []any{&w.pid, &w.since}, func() error {
				seen[w] = true
				return nil
			})
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return len(seen)
}

// counts are sums over every billing process's metrics.
type counts struct {
	answered503 int64 // API 503s and webhook deliveries answered 503
	notDurable  int64 // commits refused as not durable
}

// scrape reads every billing process's /metrics and sums them. Each sum
// only grows: a process that does not answer (busy during a fault) counts
// as it did at its last answer, and one whose counters went back (a
// process restarted) keeps what it had counted before. Otherwise the
// difference of two scrapes could come out negative.
func (r *Run) scrape(ctx context.Context) counts {
	s := &r.fo.scraped
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last, s.carried = map[string]counts{}, map[string]counts{}
	}
	var total counts
	for _, addr := range r.fo.metrics {
		if body, err := get(ctx, r.hc, "http://"+addr+"/metrics"); err == nil {
			now := parseCounts(body)
			if last := s.last[addr]; now.answered503 < last.answered503 || now.notDurable < last.notDurable {
				s.carried[addr] = s.carried[addr].plus(last)
			}
			s.last[addr] = now
		}
		total = total.plus(s.carried[addr].plus(s.last[addr]))
	}
	return total
}

// scrapes is what scrape has seen of each process, by metrics address.
type scrapes struct {
	mu      sync.Mutex
	last    map[string]counts // each process's last answer
	carried map[string]counts // what its earlier lives counted
}

func (c counts) plus(o counts) counts {
	return counts{answered503: c.answered503 + o.answered503, notDurable: c.notDurable + o.notDurable}
}

// parseCounts sums one process's /metrics body.
func parseCounts(body string) counts {
	var c counts
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "billing_http_requests_total{") && strings.Contains(line, `code="503"`),
			strings.HasPrefix(line, "billing_webhook_deliveries_total{") && strings.Contains(line, `outcome="error"`):
			c.answered503 += sampleValue(line)
		case strings.HasPrefix(line, "billing_db_commits_not_durable_total"):
			c.notDurable += sampleValue(line)
		}
	}
	return c
}
