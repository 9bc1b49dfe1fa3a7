package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/web/httpapi"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

func init() {
	Register(&Benchmark{
		Name:  "api-replay",
		Short: "A replayed POST (completed Idempotency-Key) beside a plain authenticated GET, same server, same run",
		Flags: func(fs *pflag.FlagSet) {
			fs.Int("rounds", 2, "alternating GET/replay rounds (each runs --duration / rounds)")
		},
		Run: runAPIReplay,
	})
}

// apiClient is one benchmark client: its own player, key and replay key.
type apiClient struct {
	apiKey string
	key    string // Idempotency-Key of a completed POST /v1/conversions
}

// runAPIReplay measures what a retry costs: POST /v1/conversions with a key
// whose first request completed (auth + one key lookup + the stored
// answer) against GET /v1/wallets (auth + one balance query), both over
// the real handler on a loopback listener. Rounds alternate so that
// background noise hits both sides alike.
func runAPIReplay(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error) {
	rounds, _ := fs.GetInt("rounds")
	if rounds < 1 {
		return nil, errors.New("--rounds must be at least 1")
	}
	url, stop, err := serveAPI(ctx, env)
	if err != nil {
		return nil, err
	}
	defer stop()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: env.Clients * 2, MaxIdleConnsPerHost: env.Clients * 2}}
	clients, err := replayClients(ctx, env, hc, url)
	if err != nil {
		return nil, err
	}
	get := func(ctx context.Context, c int, _ int64) error {
		return call(ctx, hc, http.MethodGet, url+"/v1/wallets", clients[c].apiKey, "", "", false)
	}
	replay := func(ctx context.Context, c int, _ int64) error {
		return call(ctx, hc, http.MethodPost, url+"/v1/conversions", clients[c].apiKey, clients[c].key, `{"mana":1}`, true)
	}
	env.Progressf("warm-up: 1s of each")
	Load(ctx, "warmup", env.Clients, time.Second, get)
	Load(ctx, "warmup", env.Clients, time.Second, replay)

	slice := env.Duration / time.Duration(rounds)
	var gets, replays []*Report
	for i := range rounds {
		env.Progressf("round %d/%d: GET /v1/wallets then replayed POST /v1/conversions, %d clients, %s each", i+1, rounds, env.Clients, slice)
		gets = append(gets, Load(ctx, "get_wallets", env.Clients, slice, get))
		replays = append(replays, Load(ctx, "replayed_post", env.Clients, slice, replay))
	}
	r, base := merge("api_replay", replays), merge("get_wallets", gets)
	r.AddBaseline("get_wallets", base)
	if base.P50ms > 0 {
		r.Note("p50_ratio_replay_over_get", math.Round(r.P50ms/base.P50ms*100)/100)
		r.Note("p99_ratio_replay_over_get", math.Round(r.P99ms/base.P99ms*100)/100)
	}
	r.Note("goal", "replay p50 within 1.5x of the GET's p50")
	r.Note("latency", "closed loop over a real loopback HTTP listener; per round: GET slice then replay slice")
	return r, nil
}

// serveAPI serves the real handler on a loopback port, without the
// per-player rate limit: each client is one player sending as fast as it
// can, and the benchmark measures the replay path, not the limiter.
func serveAPI(ctx context.Context, env Env) (string, func(), error) {
	client, err := jobs.NewClient(env.Pool, jobs.Options{Logger: env.Logger})
	if err != nil {
		return "", nil, err
	}
	h, err := httpapi.New(httpapi.Options{Pool: env.Pool, River: client, Wallet: env.Wallet, TZ: env.TZ, Logger: env.Logger})
	if err != nil {
		return "", nil, err
	}
	return serveLoopback(ctx, h)
}

// replayClients makes a player per client with some Mana and completes one
// conversion per player under the key the client will replay.
func replayClients(ctx context.Context, env Env, hc *http.Client, url string) ([]apiClient, error) {
	w := env.Wallet
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	out := make([]apiClient, env.Clients)
	for i := range out {
		p, key, err := players.Create(ctx, env.Pool, fmt.Sprintf("bench-api-%s-%d", run, i))
		if err != nil {
			return nil, err
		}
		if _, err := w.Credit(ctx, wallet.PostParams{PlayerID: p.ID, Currency: wallet.Mana, Amount: 10,
			Kind: wallet.KindAdjustment, Reference: "bench api-replay", IdempotencyKey: wallet.CallerKey("bench:api:" + run + ":" + strconv.Itoa(i))}); err != nil {
			return nil, err
		}
		out[i] = apiClient{apiKey: key, key: "bench-" + run + "-" + strconv.Itoa(i)}
		if err := call(ctx, hc, http.MethodPost, url+"/v1/conversions", key, out[i].key, `{"mana":1}`, false); err != nil {
			return nil, fmt.Errorf("first POST: %w", err)
		}
	}
	return out, nil
}

// call makes one request and checks it answered 2xx (and, for a replay,
// that it was one).
func call(ctx context.Context, hc *http.Client, method, url, apiKey, key, body string, wantReplay bool) error {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d", method, url, resp.StatusCode)
	}
	if wantReplay && resp.Header.Get("X-Idempotent-Replayed") != "true" {
		return fmt.Errorf("%s %s: not a replay", method, url)
	}
	return nil
}

// merge combines rounds: ops add up, latency quantiles are the rounds'
// ops-weighted mean (each round is a large sample of the same load).
func merge(name string, rs []*Report) *Report {
	out := &Report{Name: name}
	var p50, p99 float64
	for _, r := range rs {
		out.Clients = r.Clients
		out.Seconds += r.Seconds
		out.Ops += r.Ops
		out.Errors += r.Errors
		p50 += r.P50ms * float64(r.Ops)
		p99 += r.P99ms * float64(r.Ops)
	}
	if out.Ops > 0 {
		out.P50ms = round(p50 / float64(out.Ops))
		out.P99ms = round(p99 / float64(out.Ops))
	}
	if out.Seconds > 0 {
		out.OpsPerSec = round(float64(out.Ops) / out.Seconds)
	}
	out.Seconds = round(out.Seconds)
	return out
}
