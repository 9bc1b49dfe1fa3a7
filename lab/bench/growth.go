package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/wallet"
)

func init() {
	Register(&Benchmark{
		Name:  "growth",
		Short: "Cost as the ledger grows: post rates, list pages and ledger verify at 1M and 10M transactions (seeded by SQL), and the idempotency reaper under load",
		Flags: func(fs *pflag.FlagSet) {
			fs.Int("players", 100_000, "players whose Sparks wallets hold the seeded transactions (0 with --reap-for: only the reaper run)")
			fs.String("sizes", "1000000,10000000", "ledger sizes (wallet transactions) to grow to and measure at, ascending")
			fs.Float64("whale-share", 0.01, "share of each growth step that goes to one player (the deep pages of the list)")
			fs.Bool("verify", true, "time `billing ledger verify` (a child process: its peak RSS is its own) at each size")
			fs.Duration("list-duration", 3*time.Second, "how long each list page kind is requested at each size")
			growthReaperFlags(fs)
		},
		Run: runGrowth,
	})
}

// parseSizes reads --sizes: positive, strictly ascending transaction counts.
func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(f, "_", ""), 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--sizes: %q is not a positive count", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("--sizes must ascend: %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("--sizes: at least one size")
	}
	return out, nil
}

// growth is one invocation's seeded population.
type growth struct {
	env         Env
	store       *wallet.Store
	run         string
	players     []int64 // the growth players, whale excluded
	whale       int64
	whaleAPIKey string
	url         string
	hc          *http.Client
	next        []int64 // per client, numbers post keys across measurements
}

// growthStep is what is measured at one ledger size.
type growthStep struct {
	Transactions   int64   `json:"transactions"`
	WhaleTxs       int64   `json:"whale_transactions"`
	SeedSeconds    float64 `json:"seed_seconds"`
	PostsDistinct  *Report `json:"posts_distinct"`
	PostsHot       *Report `json:"posts_hot"`
	ListFirst      *Report `json:"list_first_page"`
	ListDeep       *Report `json:"list_deep_page"`
	VerifySeconds  float64 `json:"verify_seconds,omitempty"`
	VerifyPeakRSS  int64   `json:"verify_peak_rss_kb,omitempty"`
	VerifyClean    bool    `json:"verify_clean,omitempty"`
	DatabaseMB     int64   `json:"database_mb"`
	LoadAverage    string  `json:"load_average"`
	VerifyProblems string  `json:"verify_output,omitempty"`
}

func runGrowth(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error) {
	nPlayers, _ := fs.GetInt("players")
	sizesFlag, _ := fs.GetString("sizes")
	whaleShare, _ := fs.GetFloat64("whale-share")
	sizes, err := parseSizes(sizesFlag)
	if err != nil {
		return nil, err
	}
	if nPlayers < 0 || whaleShare < 0 || whaleShare >= 1 {
		return nil, errors.New("--players must not be negative and --whale-share within [0, 1)")
	}
	g := &growth{env: env, store: env.Wallet,
		run: strconv.FormatInt(time.Now().UnixNano(), 36), next: make([]int64, env.Clients)}
	url, stop, err := serveAPI(ctx, env)
	if err != nil {
		return nil, err
	}
	defer stop()
	g.url = url
	g.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: env.Clients * 2}}
	if nPlayers == 0 { // only the reaper run
		report := &Report{Name: "growth_reaper", Clients: env.Clients}
		return report, g.reaper(ctx, fs, report)
	}
	start := time.Now()
	if err := g.seedPlayers(ctx, nPlayers); err != nil {
		return nil, err
	}
	env.Progressf("growth: %d players with funded Sparks wallets in %s", nPlayers, time.Since(start).Round(time.Millisecond))

	// Warm up (connections, cached statements) so that the empty ledger's
	// figures are not its cold start.
	Load(ctx, "warmup", env.Clients, 2*time.Second, withRNG(env.Clients, g.post(false)))
	var steps []*growthStep
	empty, err := g.measure(ctx, fs, 0)
	if err != nil {
		return nil, err
	}
	steps = append(steps, empty)
	for _, size := range sizes {
		step, err := g.growTo(ctx, fs, size, whaleShare)
		if err != nil {
			return nil, err
		}
		steps = append(steps, step)
	}
	last := steps[len(steps)-1]
	report := *last.PostsDistinct // a copy: the steps hold the original
	report.Name = "growth"
	report.AddBaseline("posts_distinct_empty", empty.PostsDistinct)
	report.AddBaseline("posts_hot_empty", empty.PostsHot)
	report.Ratios["posts_hot_vs_empty"] = ratio(last.PostsHot.OpsPerSec, empty.PostsHot.OpsPerSec)
	report.Note("steps", steps)
	report.Note("players", nPlayers)
	report.Note("goal", "posts at the largest size >= 0.8x empty; list p99 < 10 ms at any depth; verify < 60 s in constant memory")
	if err := g.reaper(ctx, fs, &report); err != nil {
		return nil, err
	}
	return &report, nil
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return round(a / b)
}

// seedPlayers creates the growth players and the whale by SQL, each with
// a Sparks wallet funded by one adjustment (so debits are never refused).
func (g *growth) seedPlayers(ctx context.Context, n int) error {
	w, key, err := players.Create(ctx, g.env.Pool, "growth-whale-"+g.run)
	if err != nil {
		return err
	}
	g.whale, g.whaleAPIKey = w.ID, key
	rows, err := g.env.Pool.Query(ctx, `INSERT INTO players (name)
		SELECT 'growth-' || $1::text || '-' || i FROM generate_series(1, $2::int) i RETURNING id`, g.run, n)
	if err != nil {
		return fmt.Errorf("bench growth: players: %w", err)
	}
	if g.players, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return fmt.Errorf("bench growth: players: %w", err)
	}
	all := append([]int64{g.whale}, g.players...)
	if _, err := g.env.Pool.Exec(ctx, `INSERT INTO wallets (player_id, currency) SELECT p, 'sparks' FROM unnest($1::bigint[]) p`, all); err != nil {
		return fmt.Errorf("bench growth: wallets: %w", err)
	}
	for i := 0; i < len(all); i += growthBatch {
		if err := g.credit(ctx, all[i:min(i+growthBatch, len(all))], 1, walletSeed); err != nil {
			return err
		}
	}
	return nil
}

// growthBatch is how many players one seeding statement covers.
const growthBatch = 2000

// growthSQL appends $2 credits of $3 Sparks to each of the players $1's
// Sparks wallets, with their two ledger entries each, balances and entry
// numbers carried on, exactly as that many wallet posts would leave them
// (the audit stays clean). One statement per batch of players: minutes for
// millions of rows, not hours.
const growthSQL = `WITH w AS (
    SELECT id, player_id, currency, balance, seq FROM wallets
    WHERE player_id = ANY($1::bigint[]) AND currency = 'sparks' FOR UPDATE),
t AS (
    INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    SELECT w.id, w.player_id, w.currency, $3::bigint, 'adjustment', 'growth', 'growth:' || w.id || ':' || (w.seq + s), w.balance + s * $3::bigint
    FROM w, generate_series(1, $2::int) s ORDER BY w.id, s
    RETURNING id, wallet_id, currency, balance_after),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT t.id, 'wallet', t.wallet_id, t.currency, $3::bigint, t.balance_after, w.seq + (t.balance_after - w.balance) / $3::bigint
    FROM t JOIN w ON w.id = t.wallet_id
    UNION ALL
    SELECT t.id, $4::text, NULL, t.currency, -$3::bigint, NULL, NULL FROM t)
UPDATE wallets SET balance = wallets.balance + $2::int * $3::bigint, seq = wallets.seq + $2::int
FROM w WHERE wallets.id = w.id`

func (g *growth) credit(ctx context.Context, batch []int64, perWallet int, amount int64) error {
	if perWallet <= 0 {
		return nil
	}
	if _, err := g.env.Pool.Exec(ctx, growthSQL, batch, perWallet, amount, wallet.AccountAdjustments); err != nil {
		return fmt.Errorf("bench growth: seed: %w", err)
	}
	return nil
}

// growTo adds transactions until the ledger holds size, whaleShare of
// them on the whale, then measures.
func (g *growth) growTo(ctx context.Context, fs *pflag.FlagSet, size int64, whaleShare float64) (*growthStep, error) {
	start := time.Now()
	if err := g.grow(ctx, size, whaleShare); err != nil {
		return nil, err
	}
	seed := time.Since(start)
	step, err := g.measure(ctx, fs, size)
	if err != nil {
		return nil, err
	}
	step.SeedSeconds = round(seed.Seconds())
	return step, nil
}

// grow adds transactions until the ledger holds size, whaleShare of them
// on the whale, and analyzes the tables.
func (g *growth) grow(ctx context.Context, size int64, whaleShare float64) error {
	var have int64
	if err := g.env.Pool.QueryRow(ctx, `SELECT count(*) FROM wallet_transactions`).Scan(&have); err != nil {
		return err
	}
	start := time.Now()
	if add := size - have; add > 0 {
		whaleAdd := int64(float64(add) * whaleShare)
		per := int((add - whaleAdd) / int64(len(g.players)))
		g.env.Progressf("growth: %d -> %d transactions (%d per player, %d on the whale)", have, size, per, whaleAdd)
		for i := 0; i < len(g.players); i += growthBatch {
			if err := g.credit(ctx, g.players[i:min(i+growthBatch, len(g.players))], per, 1); err != nil {
				return err
			}
			if done := i + growthBatch; done%(growthBatch*10) == 0 {
				g.env.Progressf("growth: %d of %d players, %s", done, len(g.players), time.Since(start).Round(time.Second))
			}
		}
		for left := whaleAdd; left > 0; left -= 100_000 {
			if err := g.credit(ctx, []int64{g.whale}, int(min(left, 100_000)), 1); err != nil {
				return err
			}
		}
		if _, err := g.env.Pool.Exec(ctx, `VACUUM ANALYZE wallet_transactions, ledger_entries, wallets`); err != nil {
			return err
		}
	}
	return nil
}

// measure takes every measurement at the current size.
func (g *growth) measure(ctx context.Context, fs *pflag.FlagSet, size int64) (*growthStep, error) {
	st := &growthStep{LoadAverage: loadAverage()}
	if err := g.env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM wallet_transactions),
		(SELECT count(*) FROM wallet_transactions WHERE player_id = $1), pg_database_size(current_database()) / 1048576`,
		g.whale).Scan(&st.Transactions, &st.WhaleTxs, &st.DatabaseMB); err != nil {
		return nil, err
	}
	g.env.Progressf("growth: measuring at %d transactions (whale %d; load %s)", st.Transactions, st.WhaleTxs, st.LoadAverage)
	st.PostsDistinct = Load(ctx, "posts_distinct", g.env.Clients, g.env.Duration, withRNG(g.env.Clients, g.post(false)))
	st.PostsHot = Load(ctx, "posts_hot", g.env.Clients, g.env.Duration, withRNG(g.env.Clients, g.post(true)))
	listFor, _ := fs.GetDuration("list-duration")
	var oldest, newest int64
	if err := g.env.Pool.QueryRow(ctx, `SELECT min(id), max(id) FROM wallet_transactions WHERE player_id = $1`, g.whale).
		Scan(&oldest, &newest); err != nil {
		return nil, err
	}
	st.ListFirst = Load(ctx, "list_first_page", g.env.Clients, listFor, g.list(0, 0))
	// Deep pages: cursors in the oldest tenth of the whale's history.
	st.ListDeep = Load(ctx, "list_deep_page", g.env.Clients, listFor, g.list(oldest+50, oldest+max((newest-oldest)/10, 51)))
	if verify, _ := fs.GetBool("verify"); verify {
		if err := g.verify(ctx, st); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// post debits 1 Spark with a fresh key from a random growth player (or
// always the same one, hot).
func (g *growth) post(hot bool) func(ctx context.Context, c int, _ int64, rng *rand.Rand) error {
	return func(ctx context.Context, c int, _ int64, rng *rand.Rand) error {
		g.next[c]++
		p := g.players[0]
		if !hot {
			p = g.players[rng.IntN(len(g.players))]
		}
		t, err := g.store.Post(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1, Direction: wallet.Debit,
			Kind: wallet.KindAdjustment, Reference: "growth", IdempotencyKey: wallet.CallerKey(fmt.Sprintf("growth:%s:%d:%d", g.run, c, g.next[c]))})
		if err == nil && t.Replayed {
			err = errors.New("fresh key replayed")
		}
		return err
	}
}

// list GETs one page (50) of the whale's Sparks transactions over HTTP;
// with lo < hi, before a random cursor in [lo, hi).
func (g *growth) list(lo, hi int64) Op {
	return func(ctx context.Context, c int, seq int64) error {
		u := g.url + "/v1/wallets/sparks/transactions?limit=50"
		if hi > lo {
			u += "&before=" + strconv.FormatInt(lo+rand.Int64N(hi-lo), 10)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+g.whaleAPIKey)
		resp, err := g.hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var page struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || len(page.Data) == 0 {
			return fmt.Errorf("list: %d with %d rows", resp.StatusCode, len(page.Data))
		}
		return nil
	}
}

// verify runs `billing ledger verify` as a child process and records its
// wall time and peak RSS (the kernel's ru_maxrss of the child).
func (g *growth) verify(ctx context.Context, st *growthStep) error {
	cmd := exec.CommandContext(ctx, g.env.Billing, "ledger", "verify", "--database-url", g.env.DatabaseURL)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	st.VerifySeconds = round(time.Since(start).Seconds())
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return fmt.Errorf("bench growth: ledger verify: %w", err)
	}
	st.VerifyClean = err == nil
	if !st.VerifyClean {
		st.VerifyProblems = lastLines(string(out), 5)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		st.VerifyPeakRSS = ru.Maxrss // kilobytes on Linux
	}
	g.env.Progressf("growth: ledger verify %.1fs, peak RSS %d kB, clean %v", st.VerifySeconds, st.VerifyPeakRSS, st.VerifyClean)
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// loadAverage is /proc/loadavg's first three fields ("" off Linux).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
