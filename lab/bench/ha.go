package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/internal/dev/formation"
	"github.com/fibe-dev/billing/internal/dev/pglocal"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/migrations"
	"github.com/fibe-dev/billing/wallet"
)

func init() {
	Register(&Benchmark{
		Name: "ha",
		Short: "Wallet posts, API writes and webhook intake on a pg_auto_failover formation (every commit confirmed by a " +
			"synchronous standby) beside the same on one PostgreSQL, in one invocation",
		OwnDatabases: true,
		Flags: func(fs *pflag.FlagSet) {
			fs.Int("rounds", 3, "rounds alternating the single node and the formation (each runs duration/rounds per workload)")
			fs.Int("wallets", 1000, "distinct players' Sparks wallets the posts are spread over")
			fs.Float64("dup-ratio", 0.25, "fraction of webhook deliveries that redeliver an event already sent")
		},
		Run: runHA,
	})
}

// haWorkloads are measured in this order in every round.
var haWorkloads = []string{"wallet_posts", "api_writes", "webhook_intake"}

// haTarget is one database under test with its workloads ready to run.
type haTarget struct {
	name string
	ops  map[string]Op
	stop []func()
}

// runHA starts, in this invocation, one PostgreSQL and a formation (a
// primary and two synchronous standbys, on the same machine and disk,
// fsync on for both), prepares the same three workloads on each, and
// measures them in alternating rounds: the ratio is the formation's rate
// over the single node's, with the p99 latency of each.
func runHA(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error) {
	rounds, _ := fs.GetInt("rounds")
	wallets, _ := fs.GetInt("wallets")
	dupRatio, _ := fs.GetFloat64("dup-ratio")
	if rounds < 1 || wallets < 1 || dupRatio < 0 || dupRatio > 1 {
		return nil, errors.New("--rounds and --wallets must be at least 1, --dup-ratio within 0..1")
	}
	dir, err := os.MkdirTemp("", "billing-bench-ha-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	urls, stopDBs, err := haDatabases(ctx, env, dir)
	if err != nil {
		return nil, err
	}
	defer stopDBs()
	var targets []*haTarget
	defer func() {
		for _, t := range targets {
			for i := len(t.stop) - 1; i >= 0; i-- { // servers before their pool
				t.stop[i]()
			}
		}
	}()
	for _, name := range []string{"single", "sync_standby"} {
		t, err := prepareHA(ctx, env, name, urls[name], wallets, dupRatio)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	measured := map[string]*series{}
	rates := map[string][]float64{} // per round, in round order
	slice := env.Duration / time.Duration(rounds)
	for r := range rounds {
		for _, w := range haWorkloads {
			for i := range targets {
				t := targets[(i+r)%len(targets)] // alternate which goes first
				env.Progressf("ha: round %d/%d: %s on %s, %d clients, %s", r+1, rounds, w, t.name, env.Clients, slice)
				key := w + "_" + t.name
				if measured[key] == nil {
					measured[key] = &series{}
				}
				rep := Load(ctx, key, env.Clients, slice, t.ops[w])
				measured[key].add(rep)
				rates[key] = append(rates[key], rep.OpsPerSec)
			}
		}
	}
	return haReport(env, measured, rates, urls["sync_standby"]), nil
}

// haDatabases starts both databases: the single node and the formation,
// each with a billing database and role.
func haDatabases(ctx context.Context, env Env, dir string) (map[string]string, func(), error) {
	env.Progressf("ha: starting one PostgreSQL and a pg_auto_failover formation (monitor + 3 data nodes) in %s", dir)
	single, err := pglocal.Start(pglocal.Options{Dir: filepath.Join(dir, "single"), Ephemeral: true})
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f, err := formation.Start(sctx, formation.Options{Dir: filepath.Join(dir, "formation"), Ephemeral: true})
	if err != nil {
		_ = single.Stop()
		return nil, nil, err
	}
	stop := func() {
		if err := f.Stop(); err != nil {
			env.Progressf("ha: stop formation: %v", err)
		}
		_ = single.Stop()
	}
	return map[string]string{"single": single.URL(), "sync_standby": f.URL()}, stop, nil
}

// prepareHA migrates url and readies the three workloads on it.
func prepareHA(ctx context.Context, env Env, name, url string, wallets int, dupRatio float64) (*haTarget, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(env.Clients*3 + 10)
	durable.Configure(pcfg, env.Logger)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	t := &haTarget{name: name, ops: map[string]Op{}, stop: []func(){pool.Close}}
	if _, err := migrations.Migrate(ctx, pool, env.Logger); err != nil {
		return t, err
	}
	e := env
	e.Pool, e.DatabaseURL, e.Wallet = pool, url, env.WalletOn(pool)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	env.Progressf("ha: %s: seeding %d wallets, %d API players, webhook orders", name, wallets, env.Clients)
	if t.ops["wallet_posts"], err = haWalletOp(ctx, e, wallets, run); err != nil {
		return t, err
	}
	if err := haAPIOp(ctx, e, t, run); err != nil {
		return t, err
	}
	return t, haWebhookOp(ctx, e, t, run, dupRatio)
}

// haWalletOp debits 1 Spark from a random funded wallet, a fresh key each.
func haWalletOp(ctx context.Context, env Env, wallets int, run string) (Op, error) {
	store := env.Wallet
	players, err := seedWallets(ctx, env, store, wallets, run)
	if err != nil {
		return nil, err
	}
	next := make([]int64, env.Clients)
	return withRNG(env.Clients, func(ctx context.Context, client int, _ int64, rng *rand.Rand) error {
		next[client]++
		_, err := store.Post(ctx, wallet.PostParams{PlayerID: players[rng.IntN(len(players))], Currency: wallet.Sparks,
			Amount: 1, Direction: wallet.Debit, Kind: wallet.KindFunding, Reference: "bench ha",
			IdempotencyKey: wallet.CallerKey(fmt.Sprintf("bench:ha:%s:%d:%d", run, client, next[client]))})
		return err
	}), nil
}

// haAPIOp POSTs a conversion with a fresh Idempotency-Key over HTTP.
func haAPIOp(ctx context.Context, env Env, t *haTarget, run string) error {
	url, stop, err := serveAPI(ctx, env)
	if err != nil {
		return err
	}
	t.stop = append(t.stop, stop)
	apiKeys, err := writeClients(ctx, env, run)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: env.Clients * 2, MaxIdleConnsPerHost: env.Clients * 2}}
	next := make([]int64, env.Clients)
	t.ops["api_writes"] = func(ctx context.Context, c int, _ int64) error {
		next[c]++
		return callFresh(ctx, hc, url+"/v1/conversions", apiKeys[c], fmt.Sprintf("ha-%s-%d-%d", run, c, next[c]))
	}
	return nil
}

// haWebhookOp delivers signed Stripe payments (and redeliveries) to the
// intake over HTTP.
func haWebhookOp(ctx context.Context, env Env, t *haTarget, run string, dupRatio float64) error {
	secret := "whsec_bench_ha_" + run
	url, stop, err := serveWebhooks(ctx, env, secret)
	if err != nil {
		return err
	}
	t.stop = append(t.stop, stop)
	orders, err := benchOrders(ctx, env, 64)
	if err != nil {
		return err
	}
	d := &deliverer{urls: []string{url + "/webhooks/" + provider.Stripe}, secret: secret, run: run,
		orders: orders, dupRatio: dupRatio, sent: make([][][]byte, env.Clients),
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: env.Clients * 2, MaxIdleConnsPerHost: env.Clients * 2}}}
	t.ops["webhook_intake"] = d.op
	return nil
}

// haReport puts each workload's two series side by side. Ratios are the
// median over the rounds of the formation's rate over the single node's
// in the same round (the two ran back to back, so a shared machine's
// drifting load falls on both); Notes hold each round's ratio and the p99
// of each side.
func haReport(env Env, measured map[string]*series, rates map[string][]float64, url string) *Report {
	r := &Report{Name: "ha", Clients: env.Clients, Baselines: map[string]*Report{}, Ratios: map[string]float64{}}
	for _, w := range haWorkloads {
		single := measured[w+"_single"].report(w + "_single")
		sync := measured[w+"_sync_standby"].report(w + "_sync_standby")
		r.Baselines[single.Name], r.Baselines[sync.Name] = single, sync
		var perRound []float64
		for i, s := range rates[w+"_single"] {
			if s > 0 {
				perRound = append(perRound, round(rates[w+"_sync_standby"][i]/s))
			}
		}
		if len(perRound) > 0 {
			r.Ratios[w] = median(perRound)
		}
		r.Note(w+"_round_ratios", perRound)
		r.Note(w+"_p99_ms", map[string]float64{"single": single.P99ms, "sync_standby": sync.P99ms})
		r.Ops += sync.Ops
		r.Errors += sync.Errors + single.Errors
	}
	r.Note("goal", "each ratio >= 0.7")
	r.Note("formation", "pg_auto_failover, 3 data nodes, number_sync_standbys 1, synchronous_commit on, fsync on; "+url)
	r.Note("single", "one PostgreSQL, fsync on, synchronous_commit on")
	return r
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return round((s[len(s)/2-1] + s[len(s)/2]) / 2)
}
