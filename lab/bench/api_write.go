package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/wallet"
)

func init() {
	Register(&Benchmark{
		Name:  "api-write",
		Short: "POST /v1/conversions with fresh Idempotency-Keys over real HTTP, beside pgbench running the same SQL",
		Flags: func(fs *pflag.FlagSet) {
			fs.Int("rounds", 3, "rounds alternating pgbench and the API (each runs --duration / rounds)")
		},
		Run: runAPIWrite,
	})
}

// apiWriteMana is what every bench player starts with: conversions of 1
// Mana never run it dry.
const apiWriteMana = 1_000_000_000

// apiWriteScript is the SQL one POST /v1/conversions with a fresh
// Idempotency-Key ran before the conversion became one statement,
// statement for statement, as pgbench sends it: the API key lookup, the
// idempotency claim (read, then insert) in autocommit, then one
// transaction with the claim's lock, the conversion's key check, both legs
// under a savepoint, and the stored response. The baseline stays that SQL,
// so its ratio shows what the request's shape saves. Each pgbench
// client is one player (:minp + client id) with a key hash of its own.
const apiWriteScript = `\set p :minp + :client_id
\set k random(1, 9000000000000000000)
SELECT player_id FROM api_keys WHERE key_hash = sha256(convert_to('pgbench-' || :run::text || '-' || :client_id::text, 'UTF8')) AND revoked_at IS NULL;
SELECT id, fingerprint, status, response_status, response_headers, response_body, locked_at, created_at
  FROM idempotency_keys WHERE player_id = :p::bigint AND key = 'pgw-' || :round::text || '-' || :k::text;
INSERT INTO idempotency_keys (player_id, key, fingerprint, status, locked_at, created_at)
  VALUES (:p::bigint, 'pgw-' || :round::text || '-' || :k::text, sha256(convert_to(:k::text, 'UTF8')), 'running', now(), now())
  ON CONFLICT (player_id, key) DO NOTHING RETURNING id AS kid, locked_at AS la \gset
BEGIN;
SELECT 1 FROM idempotency_keys WHERE id = :kid::bigint AND status = 'running' AND locked_at = :la::timestamptz FOR UPDATE;
SELECT id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at
  FROM wallet_transactions WHERE idempotency_key IN ('pgw:' || :round::text || ':' || :p::text || ':' || :k::text || ':' || 'mana_debit', 'pgw:' || :round::text || ':' || :p::text || ':' || :k::text || ':' || 'sparks_credit');
SAVEPOINT wallet_post;
WITH w AS (
    UPDATE wallets SET balance = balance - 1, seq = seq + 1
    WHERE player_id = :p::bigint AND currency = 'mana' AND balance - 1 >= 0
    RETURNING id, balance, seq),
t AS (
    INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    SELECT id, :p::bigint, 'mana', -1, 'conversion', 'conversion-pgw', 'pgw:' || :round::text || ':' || :p::text || ':' || :k::text || ':' || 'mana_debit', balance FROM w
    RETURNING id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT t.id, 'wallet', t.wallet_id, 'mana', -1, t.balance_after, w.seq FROM t, w
    UNION ALL
    SELECT t.id, 'conversion', NULL, 'mana', 1, NULL, NULL FROM t)
SELECT id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at FROM t;
WITH w AS (
    INSERT INTO wallets AS cur (player_id, currency, balance, seq) VALUES (:p::bigint, 'sparks', :rate::bigint, 1)
    ON CONFLICT (player_id, currency) DO UPDATE SET balance = cur.balance + EXCLUDED.balance, seq = cur.seq + 1
    RETURNING id, balance, seq),
t AS (
    INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    SELECT id, :p::bigint, 'sparks', :rate::bigint, 'conversion', 'conversion-pgw', 'pgw:' || :round::text || ':' || :p::text || ':' || :k::text || ':' || 'sparks_credit', balance FROM w
    RETURNING id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT t.id, 'wallet', t.wallet_id, 'sparks', :rate::bigint, t.balance_after, w.seq FROM t, w
    UNION ALL
    SELECT t.id, 'conversion', NULL, 'sparks', -:rate::bigint, NULL, NULL FROM t)
SELECT id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at FROM t;
RELEASE SAVEPOINT wallet_post;
UPDATE idempotency_keys
  SET status = 'completed', response_status = 201, response_headers = '{"Content-Type":["application/json"]}',
      response_body = convert_to(:body::text, 'UTF8'), completed_at = now(), locked_at = NULL
  WHERE id = :kid::bigint AND status = 'running' AND locked_at = :la::timestamptz;
COMMIT;
`

// apiWriteBody stands in for the stored 201 answer in the pgbench script
// (the real one is about this size).
const apiWriteBody = `{"mana_debit":{"id":"123456789","currency":"mana","amount":-1,"kind":"conversion","reference":"conversion:api:1:conversion:bench","balance_after":999999999,"created_at":"2026-01-01T00:00:00.000000Z"},"sparks_credit":{"id":"123456790","currency":"sparks","amount":100,"kind":"conversion","reference":"conversion:api:1:conversion:bench","balance_after":100,"created_at":"2026-01-01T00:00:00.000000Z"}}`

// runAPIWrite measures the write path of the API: every request a new
// conversion under a new Idempotency-Key (auth, claim, both legs, stored
// answer, commit), over the real handler on a loopback listener, against
// pgbench running the same statements with no Go or HTTP in the path.
// Rounds alternate so that a shared machine's drifting load hits both.
func runAPIWrite(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error) {
	rounds, _ := fs.GetInt("rounds")
	if rounds < 1 {
		return nil, errors.New("--rounds must be at least 1")
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	url, stop, err := serveAPI(ctx, env)
	if err != nil {
		return nil, err
	}
	defer stop()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: env.Clients * 2, MaxIdleConnsPerHost: env.Clients * 2}}
	apiKeys, err := writeClients(ctx, env, run)
	if err != nil {
		return nil, err
	}
	minp, err := pgbenchPlayers(ctx, env, run)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{"minp": strconv.FormatInt(minp, 10), "run": run,
		"rate": strconv.FormatInt(max(env.SparksPerMana, 1), 10), "body": apiWriteBody}
	// Every request a fresh key: numbered per client across the warm-up
	// and the rounds (Load's seq restarts at each).
	next := make([]int64, env.Clients)
	post := func(ctx context.Context, c int, _ int64) error {
		next[c]++
		key := fmt.Sprintf("w-%s-%d-%d", run, c, next[c])
		return callFresh(ctx, hc, url+"/v1/conversions", apiKeys[c], key)
	}
	env.Progressf("api-write: warm-up 1s")
	Load(ctx, "warmup", env.Clients, time.Second, post)
	slice := env.Duration / time.Duration(rounds)
	var apis, pgs []*Report
	for i := range rounds {
		env.Progressf("api-write: round %d/%d: pgbench then POST /v1/conversions, %d clients, %s each", i+1, rounds, env.Clients, slice)
		vars["round"] = fmt.Sprintf("%s-%d", run, i) // pgbench's fixed seed repeats its keys each run
		pg, err := PgBench(ctx, "pgbench_same_sql", env.DatabaseURL, apiWriteScript, env.Clients, slice, vars)
		if err != nil {
			return nil, err
		}
		pgs = append(pgs, pg)
		apis = append(apis, Load(ctx, "api_write", env.Clients, slice, post))
	}
	r := merge("api_write", apis)
	r.AddBaseline("pgbench_same_sql", merge("pgbench_same_sql", pgs))
	r.Note("goal", ">= 0.7x pgbench_same_sql, p99 < 25 ms")
	r.Note("latency", "API: closed loop over a loopback HTTP listener, rounds' ops-weighted mean of p50/p99; pgbench: mean")
	return r, writeAudit(ctx, env, r)
}

// writeClients makes a player per API client, with Mana to convert, and
// returns their API keys.
func writeClients(ctx context.Context, env Env, run string) ([]string, error) {
	w := env.Wallet
	keys := make([]string, env.Clients)
	for i := range keys {
		p, key, err := players.Create(ctx, env.Pool, fmt.Sprintf("bench-api-write-%s-%d", run, i))
		if err != nil {
			return nil, err
		}
		if _, err := w.Credit(ctx, wallet.PostParams{PlayerID: p.ID, Currency: wallet.Mana, Amount: apiWriteMana,
			Kind: wallet.KindAdjustment, Reference: "bench api-write", IdempotencyKey: wallet.CallerKey("bench:api-write:" + run + ":" + strconv.Itoa(i))}); err != nil {
			return nil, err
		}
		keys[i] = key
	}
	return keys, nil
}

// pgbenchPlayers makes one player per pgbench client, with consecutive ids
// (the script computes its player from the first), an API key whose hash
// the script can compute, and Mana, all in one statement; the ledger stays
// balanced (the Mana comes from an adjustment posted through the wallet).
func pgbenchPlayers(ctx context.Context, env Env, run string) (int64, error) {
	rows, err := env.Pool.Query(ctx, `WITH p AS (
		INSERT INTO players (name) SELECT 'bench-pgbench-' || $1::text || '-' || g FROM generate_series(0, $2::int - 1) g
		RETURNING id, (regexp_match(name, '-([0-9]+)$'))[1] AS c)
	INSERT INTO api_keys (player_id, key_hash)
	SELECT id, sha256(convert_to('pgbench-' || $1::text || '-' || c, 'UTF8')) FROM p RETURNING player_id`, run, env.Clients)
	if err != nil {
		return 0, fmt.Errorf("bench api-write: pgbench players: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("bench api-write: pgbench players: %w", err)
	}
	minp := ids[0]
	for _, id := range ids {
		minp = min(minp, id)
	}
	w := env.Wallet
	for _, id := range ids {
		if _, err := w.Credit(ctx, wallet.PostParams{PlayerID: id, Currency: wallet.Mana, Amount: apiWriteMana,
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("bench:api-write:%s:pg:%d", run, id))}); err != nil {
			return 0, err
		}
	}
	var c int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM players p JOIN api_keys k ON k.player_id = p.id
		WHERE p.id BETWEEN $1 AND $1 + $2 - 1 AND p.name = 'bench-pgbench-' || $3 || '-' || (p.id - $1)`, minp, env.Clients, run).Scan(&c); err != nil {
		return 0, err
	}
	if c != env.Clients {
		return 0, fmt.Errorf("bench api-write: pgbench player ids are not consecutive (concurrent inserts?): use a scratch database")
	}
	return minp, nil
}

// writeAudit runs the full ledger audit after the load and notes it.
func writeAudit(ctx context.Context, env Env, r *Report) error {
	audit, err := wallet.Audit(ctx, env.Pool, wallet.AuditOptions{})
	if err != nil {
		return err
	}
	r.Note("audit_clean", audit.Clean())
	r.Note("audit", audit.Summary())
	return nil
}

// callFresh POSTs one conversion and checks it was created now (201, not
// a replay).
func callFresh(ctx context.Context, hc *http.Client, url, apiKey, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"mana":1}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Idempotent-Replayed") == "true" {
		return fmt.Errorf("POST %s: %d (replayed %q)", url, resp.StatusCode, resp.Header.Get("X-Idempotent-Replayed"))
	}
	return nil
}
