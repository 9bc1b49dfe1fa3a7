package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/wallet"
)

func init() {
	Register(&Benchmark{
		Name:  "wallet",
		Short: "Wallet posts (funding-style debits of 1 Spark, each a fresh key) beside three pgbench baselines",
		Flags: func(fs *pflag.FlagSet) {
			fs.Int("wallets", 10000, "distinct players' Sparks wallets to spread the posts over")
			fs.Bool("hot", false, "every post hits one player's wallet")
			fs.Bool("replay", false, "measure first posts, then replay their keys (every key already used)")
			fs.Int("rounds", 5, "rounds alternating the baselines and first posts (each runs duration/rounds), so a shared machine's drifting load falls on all alike")
		},
		Run: runWallet,
	})
}

// walletSeed is what every funded bench wallet starts with: posts of 1
// never run it dry, so no post is refused.
const walletSeed = 1_000_000_000_000_000

func runWallet(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error) {
	wallets, _ := fs.GetInt("wallets")
	hot, _ := fs.GetBool("hot")
	replay, _ := fs.GetBool("replay")
	rounds, _ := fs.GetInt("rounds")
	if rounds < 1 {
		return nil, fmt.Errorf("--rounds must be at least 1")
	}
	if hot {
		wallets = 1
	}
	if wallets < 1 {
		return nil, fmt.Errorf("--wallets must be at least 1")
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	store := env.Wallet

	seedStart := time.Now()
	players, err := seedWallets(ctx, env, store, wallets, run)
	if err != nil {
		return nil, err
	}
	seedTime := time.Since(seedStart)
	env.Progressf("seeded %d funded wallets in %s", wallets, seedTime.Round(time.Millisecond))

	vars := postVars(players[0], players[len(players)-1], run)
	keys := make([][]wallet.PostParams, env.Clients) // per client, for --replay
	// Numbers each client's keys across rounds; a post cut off by a round's
	// end may have committed, so its key is never used again.
	next := make([]int64, env.Clients)
	post := func(ctx context.Context, client int, _ int64, rng *rand.Rand) error {
		next[client]++
		p := wallet.PostParams{PlayerID: players[rng.IntN(len(players))], Currency: wallet.Sparks, Amount: 1,
			Direction: wallet.Debit, Kind: wallet.KindFunding, Reference: "bench",
			IdempotencyKey: wallet.CallerKey(fmt.Sprintf("bench:%s:%d:%d", run, client, next[client]))}
		t, err := store.Post(ctx, p)
		if err == nil && t.Replayed {
			err = fmt.Errorf("fresh key %q replayed", p.IdempotencyKey)
		}
		if err == nil {
			keys[client] = append(keys[client], p)
		}
		return err
	}
	measured := map[string]*series{}
	measure := func(name string, r *Report) {
		if measured[name] == nil {
			measured[name] = &series{}
		}
		measured[name].add(r)
	}
	slice := env.Duration / time.Duration(rounds)
	for r := range rounds {
		env.Progressf("wallet: round %d of %d: baseline (a) literal multi-statement post, baseline (b) one data-modifying CTE, baseline (c) wallet.Post's own statement, wallet.Post first posts; %d clients, %s each",
			r+1, rounds, env.Clients, slice)
		vars["run"] = fmt.Sprintf("%s-%d", run, r) // pgbench's fixed seed repeats its keys each run
		for _, b := range []struct{ name, script string }{
			{"pgbench_literal", literalPostScript}, {"pgbench_cte", ctePostScript}, {"pgbench_statement", statementPostScript},
		} {
			rep, err := PgBench(ctx, b.name, env.DatabaseURL, b.script, env.Clients, slice, vars)
			if err != nil {
				return nil, err
			}
			measure(b.name, rep)
		}
		measure("wallet_first_posts", Load(ctx, "wallet_first_posts", env.Clients, slice, withRNG(env.Clients, post)))
	}
	first := measured["wallet_first_posts"].report("wallet_first_posts")
	report := first
	if replay {
		replays := func(ctx context.Context, client int, seq int64) error {
			ks := keys[client]
			if len(ks) == 0 {
				return fmt.Errorf("client %d has no key to replay", client)
			}
			t, err := store.Post(ctx, ks[seq%int64(len(ks))])
			if err == nil && !t.Replayed {
				err = fmt.Errorf("used key %q was not a replay", t.IdempotencyKey)
			}
			return err
		}
		for r := range rounds {
			env.Progressf("wallet: replay round %d of %d: baseline (c) replaying the seed keys, wallet.Post replaying %d used keys; %d clients, %s each",
				r+1, rounds, first.Ops, env.Clients, slice)
			rep, err := PgBench(ctx, "pgbench_statement_replay", env.DatabaseURL, statementReplayScript, env.Clients, slice, vars)
			if err != nil {
				return nil, err
			}
			measure("pgbench_statement_replay", rep)
			measure("wallet_replay", Load(ctx, "wallet_replay", env.Clients, slice, replays))
		}
		report = measured["wallet_replay"].report("wallet_replay")
		report.AddBaseline("first_posts", first)
		report.AddBaseline("pgbench_statement_replay", measured["pgbench_statement_replay"].report("pgbench_statement_replay"))
	}
	for _, name := range []string{"pgbench_literal", "pgbench_cte", "pgbench_statement"} {
		report.AddBaseline(name, measured[name].report(name))
	}
	report.Name = "wallet"
	report.Note("wallets", wallets)
	report.Note("mode", map[bool]string{false: "fresh keys", true: "replay"}[replay])
	report.Note("hot", hot)
	report.Note("seed_seconds", round(seedTime.Seconds()))
	report.Note("rounds", rounds)
	report.Note("percentiles", "p50: median of the rounds' p50s; p99: the worst round's (pgbench: mean latency)")

	auditStart := time.Now()
	audit, err := wallet.Audit(ctx, env.Pool, wallet.AuditOptions{})
	if err != nil {
		return nil, err
	}
	report.Note("audit_clean", audit.Clean())
	report.Note("audit", audit.Summary())
	report.Note("audit_seconds", round(time.Since(auditStart).Seconds()))
	return report, nil
}

// withRNG gives each client its own random source.
func withRNG(clients int, op func(ctx context.Context, client int, seq int64, rng *rand.Rand) error) Op {
	rngs := make([]*rand.Rand, clients)
	for c := range rngs {
		rngs[c] = rand.New(rand.NewPCG(uint64(c), 42))
	}
	return func(ctx context.Context, client int, seq int64) error { return op(ctx, client, seq, rngs[client]) }
}

// seedWallets creates n players with consecutive ids (pgbench picks them by
// range) and funds each one's Sparks wallet through the Store.
func seedWallets(ctx context.Context, env Env, store *wallet.Store, n int, run string) ([]int64, error) {
	rows, err := env.Pool.Query(ctx, `INSERT INTO players (name) SELECT 'bench-' || $1::text || '-' || g FROM generate_series(1, $2::int) g RETURNING id`, run, n)
	if err != nil {
		return nil, fmt.Errorf("bench wallet: create players: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("bench wallet: create players: %w", err)
	}
	if ids[len(ids)-1]-ids[0] != int64(n-1) {
		return nil, fmt.Errorf("bench wallet: player ids %d..%d are not consecutive (concurrent inserts?): use a scratch database", ids[0], ids[len(ids)-1])
	}
	var wg sync.WaitGroup
	errs := make(chan error, env.Clients)
	for c := range env.Clients {
		wg.Go(func() {
			for i := c; i < n; i += env.Clients {
				_, err := store.Credit(ctx, wallet.PostParams{PlayerID: ids[i], Currency: wallet.Sparks, Amount: walletSeed,
					Kind: wallet.KindAdjustment, Reference: "bench seed", IdempotencyKey: wallet.CallerKey(seedKeyPrefix(run) + strconv.FormatInt(ids[i], 10))})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("bench wallet: fund: %w", err)
	}
	return ids, nil
}

// literalPostScript is baseline (a): the post as the design spells it out,
// one statement per step in one transaction, the new balance computed by
// the client. -M prepared; pgbench's \gset carries values between steps.
const literalPostScript = `\set p random(:minp, :maxp)
\set k random(1, 9000000000000000000)
BEGIN;
SELECT id FROM wallet_transactions WHERE idempotency_key = 'pga:' || :run::text || ':' || :client_id::text || ':' || :k::text;
SELECT id AS wid, balance AS bal, seq AS s FROM wallets WHERE player_id = :p::bigint AND currency = 'sparks' FOR UPDATE \gset
\set nb :bal - 1
\set ns :s + 1
\if :nb >= 0
UPDATE wallets SET balance = :nb::bigint, seq = :ns::bigint WHERE id = :wid::bigint;
INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
VALUES (:wid::bigint, :p::bigint, 'sparks', -1, 'funding', 'bench', 'pga:' || :run::text || ':' || :client_id::text || ':' || :k::text, :nb::bigint)
RETURNING id AS tid \gset
INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
VALUES (:tid::bigint, 'wallet', :wid::bigint, 'sparks', -1, :nb::bigint, :ns::bigint),
       (:tid::bigint, 'funding_revenue', NULL, 'sparks', 1, NULL, NULL);
\endif
COMMIT;
`

// ctePostScript is baseline (b): the same effect as one statement, the
// shape wallet.Post uses, without its pre-check round trip.
const ctePostScript = `\set p random(:minp, :maxp)
\set k random(1, 9000000000000000000)
WITH w AS (
    UPDATE wallets SET balance = balance - 1, seq = seq + 1
    WHERE player_id = :p::bigint AND currency = 'sparks' AND balance - 1 >= 0
    RETURNING id, balance, seq),
t AS (
    INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    SELECT id, :p::bigint, 'sparks', -1, 'funding', 'bench', 'pgb:' || :run::text || ':' || :client_id::text || ':' || :k::text, balance FROM w
    RETURNING id, wallet_id, balance_after),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT t.id, 'wallet', t.wallet_id, 'sparks', -1, t.balance_after, w.seq FROM t, w
    UNION ALL
    SELECT t.id, 'funding_revenue', NULL, 'sparks', 1, NULL, NULL FROM t)
SELECT id FROM t;
`

// postVars are the pgbench variables of the post scripts: the players'
// id range, the run (part of every key), and baseline (c)'s bound
// parameters, the same post wallet.Post makes (a funding debit of 1).
func postVars(minPlayer, maxPlayer int64, run string) map[string]string {
	return map[string]string{"minp": strconv.FormatInt(minPlayer, 10), "maxp": strconv.FormatInt(maxPlayer, 10), "run": run,
		"cur": string(wallet.Sparks), "amt": "-1", "kind": string(wallet.KindFunding), "ref": "bench",
		"acct": wallet.AccountFundingRevenue, "seedkey": seedKeyPrefix(run)}
}

// seedKeyPrefix begins the key of each seed credit; the player id ends it.
// Baseline (c) replays these keys: every player in range has one.
func seedKeyPrefix(run string) string { return "bench:" + run + ":seed:" }

// Baseline (c) is wallet.Post's own debit statement (wallet.DebitStatement,
// not a copy) run by pgbench, with its parameters bound from pgbench
// variables: the gap between (b) and (c) is what the statement costs over
// the bare CTE (its key probe, its wider result), and the gap between (c)
// and wallet.Post is what the Go client costs. statementPostScript posts
// under fresh keys; statementReplayScript replays the seed credits' keys,
// so the statement takes its replay path (the key probe answers, the wallet
// is not touched).
var (
	statementPostScript = `\set p random(:minp, :maxp)
\set k random(1, 9000000000000000000)
` + statementWithKey(`('pgs:' || :run::text || ':' || :client_id::text || ':' || :k::text)`) + ";\n"
	statementReplayScript = `\set p random(:minp, :maxp)
` + statementWithKey(`(:seedkey::text || :p::text)`) + ";\n"
)

// statementParam is a parameter of wallet.DebitStatement.
var statementParam = regexp.MustCompile(`\$([0-9]+)`)

// statementWithKey binds wallet.DebitStatement's parameters to pgbench
// variables, the key to keyExpr. The statement casts every use of its
// parameters, so the variables keep their types. A parameter it does not
// know stays as it is: pgbench then refuses the script with a clear error
// (and TestStatementScriptsBindEveryParameter fails), rather than the
// billing binary panicking as it starts.
func statementWithKey(keyExpr string) string {
	vars := map[string]string{"1": ":p", "2": ":cur", "3": ":amt", "4": ":kind", "5": ":ref", "6": keyExpr, "7": ":acct"}
	return statementParam.ReplaceAllStringFunc(wallet.DebitStatement(), func(m string) string {
		if v, ok := vars[m[1:]]; ok {
			return v
		}
		return m
	})
}
