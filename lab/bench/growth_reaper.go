package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/internal/web/idempotency"
)

func growthReaperFlags(fs *pflag.FlagSet) {
	fs.Duration("reap-for", 0, "after the sizes: run a steady POST /v1/conversions load this long with the idempotency reaper, sampling idempotency_keys (0 skips; 10m shows the steady state)")
	fs.Duration("reap-ttl", 2*time.Minute, "the key lifetime the reaper enforces during --reap-for (24h in production, compressed here)")
	fs.Duration("reap-every", 30*time.Second, "how often the reaper runs and the table is sampled during --reap-for (hourly in production)")
	fs.Int("reap-rate", 100, "requests per second of the steady write load during --reap-for")
}

// reapSample is the key table at one moment of the reaper run.
type reapSample struct {
	AtSeconds float64 `json:"at_s"`
	Rows      int64   `json:"rows"`
	TableKB   int64   `json:"table_kb"`
	Deleted   int64   `json:"deleted"`
	ReapMs    float64 `json:"reap_ms"`
	Written   int64   `json:"written"`
}

// reaper runs a paced write load with fresh Idempotency-Keys while the
// reaper deletes keys older than --reap-ttl every --reap-every: time is
// compressed (24 h and hourly in production), the mechanics are the same.
// The table is bounded when its size stops growing at about rate x (ttl +
// every).
func (g *growth) reaper(ctx context.Context, fs *pflag.FlagSet, report *Report) error {
	d, _ := fs.GetDuration("reap-for")
	ttl, _ := fs.GetDuration("reap-ttl")
	every, _ := fs.GetDuration("reap-every")
	rate, _ := fs.GetInt("reap-rate")
	if d <= 0 {
		return nil
	}
	if ttl <= 0 || every <= 0 || rate <= 0 {
		return errors.New("--reap-ttl, --reap-every and --reap-rate must be positive")
	}
	apiKeys, err := writeClients(ctx, g.env, g.run+"-reap")
	if err != nil {
		return err
	}
	g.env.Progressf("growth: reaper: %d req/s for %s, ttl %s, reaping every %s", rate, d, ttl, every)
	lctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var written, failed int64
	var wg sync.WaitGroup
	tokens := pace(lctx, rate)
	for c := range g.env.Clients {
		wg.Go(func() {
			for n := 0; ; n++ {
				if _, ok := <-tokens; !ok {
					return
				}
				err := callFresh(lctx, g.hc, g.url+"/v1/conversions", apiKeys[c], fmt.Sprintf("reap-%s-%d-%d", g.run, c, n))
				mu.Lock()
				if err == nil {
					written++
				} else if lctx.Err() == nil {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	samples, err := g.reapLoop(lctx, ttl, every, func() int64 { mu.Lock(); defer mu.Unlock(); return written })
	wg.Wait()
	if err != nil {
		return err
	}
	report.Note("reaper", map[string]any{"samples": samples, "rate_per_sec": rate, "ttl": ttl.String(), "every": every.String(),
		"written": written, "errors": failed, "expected_steady_rows": int64(float64(rate) * (ttl + every).Seconds())})
	return nil
}

// pace sends rate tokens per second until ctx ends.
func pace(ctx context.Context, rate int) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		defer close(out)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				select {
				case out <- struct{}{}:
				default: // every writer busy: the load is behind, skip
				}
			}
		}
	}()
	return out
}

// reapLoop reaps and samples every interval until ctx ends.
func (g *growth) reapLoop(ctx context.Context, ttl, every time.Duration, written func() int64) ([]reapSample, error) {
	store := idempotency.NewStore(g.env.Pool, time.Minute)
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var samples []reapSample
	for {
		select {
		case <-ctx.Done():
			return samples, nil
		case <-tick.C:
		}
		s := reapSample{AtSeconds: round(time.Since(start).Seconds()), Written: written()}
		t0 := time.Now()
		n, err := store.Reap(context.WithoutCancel(ctx), time.Now().Add(-ttl))
		if err != nil {
			return nil, err
		}
		s.Deleted, s.ReapMs = n, round(ms(time.Since(t0)))
		if err := g.env.Pool.QueryRow(context.WithoutCancel(ctx), `SELECT count(*), pg_total_relation_size('idempotency_keys') / 1024
			FROM idempotency_keys`).Scan(&s.Rows, &s.TableKB); err != nil {
			return nil, err
		}
		g.env.Progressf("growth: reaper at %.0fs: %d keys (%d kB), reaped %d in %.1f ms, %d written", s.AtSeconds, s.Rows, s.TableKB, s.Deleted, s.ReapMs, s.Written)
		samples = append(samples, s)
	}
}
