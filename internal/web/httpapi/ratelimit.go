package httpapi

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/time/rate"

	"github.com/fibe-dev/billing/internal/web/problem"
)

// Reasons a request is refused by the limiter, the label values of
// billing_http_rate_limited_total.
const (
	limitedRate       = "rate"
	limitedConcurrent = "concurrent"
)

var rateLimited = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "billing_http_rate_limited_total",
	Help: "API requests refused with 429, by reason (rate: the player's token bucket is empty; concurrent: the player had too many requests in flight for too long).",
}, []string{"reason"})

// Limiter tuning that is not configuration.
const (
	// maxQueueWait bounds how long a request waits for one of its
	// player's in-flight slots before it is refused with 429.
	maxQueueWait = 10 * time.Second
	// idleAfter is how long a player's limiter state outlives its last
	// request; sweepEvery is how often such state is looked for.
	idleAfter  = 10 * time.Minute
	sweepEvery = time.Minute
)

// RateLimit bounds what one player (one API key's owner) may ask of the
// API, so that one tenant cannot starve the others. The zero value limits
// nothing.
type RateLimit struct {
	// PerSecond and Burst are a token bucket: requests are admitted at
	// PerSecond on average, Burst at once. PerSecond 0: no bucket.
	PerSecond float64
	Burst     int
	// Concurrent bounds one player's requests in flight (and so the
	// database connections they hold); more wait their turn. 0: unbounded.
	Concurrent int
}

// limiter bounds each player's requests: a token bucket (the rate) and a
// number of requests in flight (and so of database connections held), so
// that one player's flood cannot starve another player's requests.
type limiter struct {
	cfg       RateLimit
	mu        sync.Mutex
	now       func() time.Time
	players   map[int64]*playerLimit
	lastSweep time.Time
}

type playerLimit struct {
	bucket   *rate.Limiter // nil: no rate limit
	slots    chan struct{} // nil: no concurrency bound
	lastUsed time.Time     // guarded by limiter.mu
	// lastLogged (unix nanoseconds) spaces out the log lines of a player
	// being refused: one a minute says who, without a line per request.
	lastLogged atomic.Int64
}

// newLimiter makes the limiter of cfg; clock is its time, nil for real
// time (not Options.Now: the limiter must refill even under a test's fixed
// clock).
func newLimiter(cfg RateLimit, clock func() time.Time) *limiter {
	if clock == nil {
		clock = time.Now
	}
	return &limiter{cfg: cfg, now: clock, players: map[int64]*playerLimit{}, lastSweep: clock()}
}

func (l *limiter) enabled() bool { return l.cfg.PerSecond > 0 || l.cfg.Concurrent > 0 }

// of returns player's state, creating it, and now and then forgets idle
// players so the map stays as small as the set of active players.
func (l *limiter) of(player int64, now time.Time) *playerLimit {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > sweepEvery {
		l.lastSweep = now
		for id, p := range l.players {
			if now.Sub(p.lastUsed) > idleAfter && len(p.slots) == 0 {
				delete(l.players, id)
			}
		}
	}
	p, ok := l.players[player]
	if !ok {
		p = &playerLimit{}
		if l.cfg.PerSecond > 0 {
			p.bucket = rate.NewLimiter(rate.Limit(l.cfg.PerSecond), max(l.cfg.Burst, 1))
		}
		if l.cfg.Concurrent > 0 {
			p.slots = make(chan struct{}, l.cfg.Concurrent)
		}
		l.players[player] = p
	}
	p.lastUsed = now
	return p
}

// limit runs next within the player's limits, or answers 429 with a
// Retry-After. It runs after authentication: the limits are per player.
func (a *api) limit(next http.Handler) http.Handler {
	if !a.limiter.enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		player, _ := playerID(r)
		now := a.limiter.now()
		p := a.limiter.of(player, now)
		if wait := p.take(now); wait > 0 {
			a.tooMany(w, r, p, limitedRate, wait, "too many requests for this player; retry after the Retry-After delay")
			return
		}
		release, ok := p.enter(r)
		if !ok {
			a.tooMany(w, r, p, limitedConcurrent, time.Second, "too many requests in flight for this player; retry later")
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// take spends a token, or returns how long until one is available.
func (p *playerLimit) take(now time.Time) time.Duration {
	if p.bucket == nil {
		return 0
	}
	res := p.bucket.ReserveN(now, 1)
	if !res.OK() {
		return time.Second
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now) // a refused request spends nothing
		return d
	}
	return 0
}

// enter waits for an in-flight slot (at most maxQueueWait, and no longer
// than the client stays); release frees it.
func (p *playerLimit) enter(r *http.Request) (release func(), ok bool) {
	if p.slots == nil {
		return func() {}, true
	}
	select {
	case p.slots <- struct{}{}:
		return func() { <-p.slots }, true
	default:
	}
	timer := time.NewTimer(maxQueueWait)
	defer timer.Stop()
	select {
	case p.slots <- struct{}{}:
		return func() { <-p.slots }, true
	case <-timer.C:
	case <-r.Context().Done():
	}
	return nil, false
}

func (a *api) tooMany(w http.ResponseWriter, r *http.Request, p *playerLimit, reason string, wait time.Duration, detail string) {
	rateLimited.WithLabelValues(reason).Inc()
	now := time.Now().UnixNano()
	if last := p.lastLogged.Load(); now-last > int64(time.Minute) && p.lastLogged.CompareAndSwap(last, now) {
		player, _ := playerID(r)
		a.logger.WarnContext(r.Context(), "api rate limited (logged at most once a minute per player)",
			"player_id", player, "reason", reason, "path", r.URL.Path)
	}
	problem.SetRetryAfter(w, wait)
	problem.Write(w, http.StatusTooManyRequests, CodeRateLimited, detail)
}
