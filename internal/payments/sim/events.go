package sim

// The events billing sends, as the harness sees them: a receiver behind a
// real HTTP server that every history's endpoint points at, a River
// client working the real deliver_event worker, the operators' actions on
// endpoints and resends (letters endpoint and resend), and the checks run
// after each history: every stored event is well formed, no webhook-id
// ever carried two bodies, and the full audit is clean.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/ops/audit"
)

// receiver is every history's endpoint: it verifies each request with the
// Standard Webhooks reference library against every secret billing gave
// that endpoint, answers 2xx, and keeps per webhook-id the bodies sent.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	hooks   map[string][]*standardwebhooks.Webhook // path -> the secrets it was given
	bodies  map[string][]string                    // webhook-id -> every body sent under it
	unknown map[string][]request                   // path -> requests no secret it had been given yet verified
	visited map[string][]string                    // path -> webhook-ids delivered there
}

// request is a delivery the receiver could not verify when it came: a job
// finishing between a secret's commit and the harness trusting it (adding
// or rotating) may sign with a secret the receiver learns a moment later,
// so the check verifies such requests again once every secret is known.
type request struct {
	id     string
	body   []byte
	header http.Header
	fresh  bool // its webhook-timestamp was within the library's tolerance on arrival
}

// tolerance is the Standard Webhooks library's timestamp tolerance.
const tolerance = 5 * time.Minute

func newReceiver(t testing.TB) *receiver {
	rc := &receiver{hooks: map[string][]*standardwebhooks.Webhook{}, bodies: map[string][]string{},
		unknown: map[string][]request{}, visited: map[string][]string{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

// trust adds a secret the endpoint at path was given.
func (rc *receiver) trust(path, secret string) error {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fmt.Errorf("secret of %s: %w", path, err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.hooks[path] = append(rc.hooks[path], wh)
	return nil
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("webhook-id")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	verified := false
	for _, h := range rc.hooks[r.URL.Path] {
		verified = verified || h.Verify(body, r.Header) == nil
	}
	if !verified {
		ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
		fresh := err == nil && time.Since(time.Unix(ts, 0)).Abs() <= tolerance
		rc.unknown[r.URL.Path] = append(rc.unknown[r.URL.Path], request{id: id, body: body, header: r.Header.Clone(), fresh: fresh})
	}
	rc.bodies[id] = append(rc.bodies[id], string(body))
	rc.visited[r.URL.Path] = append(rc.visited[r.URL.Path], id)
	w.WriteHeader(http.StatusNoContent) // a bad signature is reported by the history, not retried for days
}

// startDeliveries works deliver_event jobs on pool: the real worker, on a
// River client of its own for the events queue. It polls as fast as
// testkit's clients do: River sends at most one insert notification per
// queue per FetchCooldown from the client that inserts (here the events
// package's inserter), so a delivery inserted inside that window waits
// for the next poll, one second by default, and every history waits for
// its deliveries before its checks.
func startDeliveries(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	workers := river.NewWorkers()
	events.Register(workers, events.WorkerOptions{Pool: pool, Logger: testkit.Quiet})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: testkit.Quiet, TestOnly: true,
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Workers: workers, Queues: map[string]river.QueueConfig{events.QueueEvents: {MaxWorkers: 8}}})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
		defer cancel()
		_ = client.Stop(ctx)
	})
}

// endpointPath is the receiver's path of history seed's endpoint.
func endpointPath(seed uint64) string { return fmt.Sprintf("/h%d", seed) }

// eventsStep is an operator's action on events, done as billing's
// commands do it. It never moves money: the caller checks the model
// agrees.
func (r *run) eventsStep(ctx context.Context, i int, s Step) error {
	path := endpointPath(r.h.Seed)
	switch s.Op {
	case OpEndpointAdd:
		return r.addEndpoint(ctx, path, 1+s.Copies)
	case OpEndpointOff, OpEndpointOn:
		_, err := events.SetEnabled(ctx, r.e.Pool, r.endpoint, s.Op == OpEndpointOn, "sim: step "+fmt.Sprint(i))
		return err
	case OpEndpointRot:
		_, secret, err := events.RotateSecret(ctx, r.e.Pool, r.endpoint, time.Hour)
		if err != nil {
			return err
		}
		return r.e.receiver.trust(path, secret)
	}
	return r.resend(ctx, s.Amount)
}

// addEndpoint adds the history's endpoint n times at once: one adds it
// (the first time), every other answers it as it is, with no secret.
func (r *run) addEndpoint(ctx context.Context, path string, n int) error {
	known := r.endpoint != 0
	added := make([]events.Added, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() { added[k], errs[k] = events.AddEndpoint(ctx, r.e.Pool, r.e.receiver.srv.URL+path, nil) })
	}
	wg.Wait()
	created := 0
	for k, a := range added {
		if errs[k] != nil {
			return errs[k]
		}
		if a.Created {
			created++
			r.endpoint = a.Endpoint.ID
			if err := r.e.receiver.trust(path, a.Secret); err != nil {
				return err
			}
		} else if a.Secret != "" {
			r.problem("endpoint %s added again answered its secret", path)
		}
	}
	if want := map[bool]int{false: 1, true: 0}[known]; created != want {
		r.problem("endpoint %s added %d times at once (known before: %v): %d created, want %d", path, n, known, created, want)
	}
	return nil
}

// resend resends the pick-th (mod their number) of the events of the
// history's players.
func (r *run) resend(ctx context.Context, pick int64) error {
	var id string
	err := r.e.Pool.QueryRow(ctx, `SELECT id FROM events WHERE player_id = ANY ($1)
		ORDER BY player_id, sequence OFFSET $2 % greatest((SELECT count(*) FROM events WHERE player_id = ANY ($1)), 1) LIMIT 1`,
		r.players, pick).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // nothing sent yet
	}
	if err != nil {
		return fmt.Errorf("pick an event to resend: %w", err)
	}
	_, err = events.Resend(ctx, r.e.Pool, id, 0)
	return err
}

var eventID = regexp.MustCompile(`^evt_[0-9a-f]{32}$`)

// storedEvent is a row of events, with its payload's envelope.
type storedEvent struct {
	ID, Type  string
	Player    int64
	Sequence  int64
	CreatedAt time.Time
	Payload   []byte
}

// checkEvents runs the events' checks after the history: its players'
// events are well formed, with sequences that grow with creation order;
// once the deliveries to its endpoint are done, no webhook-id carried two
// bodies and every request verified; and the full audit is clean.
func (r *run) checkEvents(ctx context.Context) error {
	rows, err := r.e.Pool.Query(ctx, `SELECT id, type, player_id, sequence, created_at, payload FROM events
		WHERE player_id = ANY ($1) ORDER BY player_id, created_at, sequence`, r.players)
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowToStructByPos[storedEvent])
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	for k, ev := range stored {
		r.wellFormed(ev)
		if k > 0 && stored[k-1].Player == ev.Player && stored[k-1].Sequence >= ev.Sequence {
			r.problem("events of player %d: %s (sequence %d, created %s) follows %s (sequence %d, created %s)", ev.Player,
				ev.ID, ev.Sequence, ev.CreatedAt.Format(time.RFC3339Nano), stored[k-1].ID, stored[k-1].Sequence,
				stored[k-1].CreatedAt.Format(time.RFC3339Nano))
		}
	}
	if r.endpoint != 0 {
		if err := r.awaitDeliveries(ctx); err != nil {
			return err
		}
		r.oneBodyPerID()
		// Disabled, it no longer takes the other histories' events.
		if _, err := events.SetEnabled(ctx, r.e.Pool, r.endpoint, false, "sim: history over"); err != nil {
			return err
		}
	}
	return r.audit(ctx)
}

// wellFormed: the id's form, and the body's envelope says what its row
// says.
func (r *run) wellFormed(ev storedEvent) {
	var env struct {
		ID         string          `json:"id"`
		Type       string          `json:"type"`
		APIVersion string          `json:"api_version"`
		PlayerID   int64           `json:"player_id"`
		Sequence   int64           `json:"sequence"`
		Data       json.RawMessage `json:"data"`
	}
	err := json.Unmarshal(ev.Payload, &env)
	if !eventID.MatchString(ev.ID) || err != nil || env.ID != ev.ID || env.Type != ev.Type || env.PlayerID != ev.Player ||
		env.Sequence != ev.Sequence || env.APIVersion != events.APIVersion || len(env.Data) == 0 || events.CheckTypes([]string{ev.Type}) != nil {
		r.problem("event %s (%s, player %d, sequence %d) is not well formed (%v): %s", ev.ID, ev.Type, ev.Player, ev.Sequence, err, ev.Payload)
	}
}

// awaitDeliveries waits until every delivery to the history's endpoint
// made so far has ended (the receiver answers 2xx: one attempt each).
func (r *run) awaitDeliveries(ctx context.Context) error {
	var last int64
	if err := r.e.Pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM event_deliveries`).Scan(&last); err != nil {
		return fmt.Errorf("read deliveries: %w", err)
	}
	deadline := time.Now().Add(jobDeadline)
	for {
		var pending int
		err := r.e.Pool.QueryRow(ctx, `SELECT count(*) FROM event_deliveries
			WHERE endpoint_id = $1 AND id <= $2 AND state = 'pending'`, r.endpoint, last).Scan(&pending)
		if err != nil {
			return fmt.Errorf("read deliveries: %w", err)
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d deliveries to endpoint %d still pending after %s", pending, r.endpoint, jobDeadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unverified are the webhook-ids of requests to path that no secret it
// was given verifies, now that every secret is known, or whose timestamp
// was stale on arrival. rc.mu is held.
func (rc *receiver) unverified(path string) []string {
	var bad []string
	for _, q := range rc.unknown[path] {
		ok := false
		for _, h := range rc.hooks[path] {
			ok = ok || h.VerifyIgnoringTimestamp(q.body, q.header) == nil
		}
		if !ok || !q.fresh {
			bad = append(bad, q.id)
		}
	}
	return bad
}

// oneBodyPerID: every webhook-id delivered to the history's endpoint
// carried one body, wherever it was sent, naming that id; every request
// to it verified.
func (r *run) oneBodyPerID() {
	rc := r.e.receiver
	path := endpointPath(r.h.Seed)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if bad := rc.unverified(path); len(bad) > 0 {
		r.problem("endpoint %s: %d requests did not verify with any secret it was given: %v", path, len(bad), bad)
	}
	for _, id := range rc.visited[path] {
		bodies := rc.bodies[id]
		var env struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(bodies[0]), &env); err != nil || env.ID != id {
			r.problem("webhook-id %s carried a body naming %q (%v)", id, env.ID, err)
		}
		for _, b := range bodies[1:] {
			if b != bodies[0] {
				r.problem("webhook-id %s carried two bodies:\n  %s\n  %s", id, bodies[0], b)
				break
			}
		}
	}
}

// audit runs the full audit, every invariant (12, the events', included):
// the env plays one history at a time (Env.Run), so every line is about a
// history that has ended, and any line is a problem.
func (r *run) audit(ctx context.Context) error {
	report, err := audit.Run(ctx, r.e.Pool, audit.Options{})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if !report.Ledger.Clean() {
		r.problem("audit: %s", report.String())
	}
	for _, l := range report.Domain {
		r.problem("audit: %s", strings.TrimSpace(l))
	}
	return nil
}
