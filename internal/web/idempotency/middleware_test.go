package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/web/idempotency"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// waitFor bounds every wait of these tests (a request, a channel, a
// group): one that hangs fails naming what it waited for, instead of
// stalling the package until go test's timeout, which names no test.
const waitFor = 30 * time.Second

// client is every request's client: a request that hangs fails after waitFor.
var client = &http.Client{Timeout: waitFor}

// await receives from ch, or fails t naming what did not come in time. A
// request posted from a goroutine that failed (require stops that
// goroutine) never sends: this is where the test says so.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("%s did not come within %s", what, waitFor)
		panic("unreachable")
	}
}

// awaitGroup waits for wg, or fails t naming what did not finish in time.
func awaitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	await(t, done, what)
}

// blockUntil blocks a handler until ch is closed; after waitFor it reports
// that the test never closed it and returns false. It runs on the server's
// goroutine, so it fails t with Errorf (never FailNow).
func blockUntil(t *testing.T, ch <-chan struct{}, what string) bool {
	select {
	case <-ch:
		return true
	case <-time.After(waitFor):
		t.Errorf("a handler waited %s for %s", waitFor, what)
		return false
	}
}

// fixture is a server whose one POST route inserts an "effect" row in the
// middleware's transaction, so tests can count effects.
type fixture struct {
	pool    *pgxpool.Pool
	srv     *httptest.Server
	mw      *idempotency.Middleware
	clock   *testkit.Clock
	player  int64
	calls   atomic.Int64
	handler atomic.Pointer[idempotency.HandlerFunc]
}

func newFixture(t *testing.T, opts idempotency.Options) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{pool: testdb.New(t), clock: testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	_, err := f.pool.Exec(ctx, `CREATE TABLE effects (id bigint GENERATED ALWAYS AS IDENTITY, player_id bigint, body text)`)
	require.NoError(t, err)
	p, _, err := players.Create(ctx, f.pool, "alice")
	require.NoError(t, err)
	f.player = p.ID
	f.setHandler(f.effect(http.StatusCreated, 0))
	f.serve(t, opts)
	return f
}

// serve puts a middleware built with opts (over the fixture's pool, clock
// and players) and a server in front of the fixture's handler: another
// process sharing the database, when called again.
func (f *fixture) serve(t *testing.T, opts idempotency.Options) {
	opts.Pool = f.pool
	opts.Now = f.clock.Now
	opts.PlayerID = func(r *http.Request) (int64, bool) {
		id, err := strconv.ParseInt(r.Header.Get("X-Player"), 10, 64)
		return id, err == nil
	}
	f.mw = idempotency.NewMiddleware(opts)
	f.srv = httptest.NewServer(f.mw.Wrap(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		f.calls.Add(1)
		(*f.handler.Load())(w, r, tx)
	}))
	t.Cleanup(f.srv.Close)
}

func (f *fixture) setHandler(h idempotency.HandlerFunc) { f.handler.Store(&h) }

// effect inserts one effects row, waits delay, and answers status with the row id.
func (f *fixture) effect(status int, delay time.Duration) idempotency.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		body, _ := io.ReadAll(r.Body)
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO effects (player_id, body) VALUES ($1, $2) RETURNING id`,
			r.Header.Get("X-Player"), string(body)).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/effects/%d", id))
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"id":"%d"}`, id)
	}
}

type result struct {
	status   int
	body     string
	replayed bool
	header   http.Header
}

func (f *fixture) post(t *testing.T, player int64, key, body string) result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/things", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Player", strconv.FormatInt(player, 10))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return result{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get("X-Idempotent-Replayed") == "true", header: resp.Header}
}

func (f *fixture) effects(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&n))
	return n
}

func (f *fixture) keyCount(t *testing.T, status string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_keys WHERE status = $1`, status).Scan(&n))
	return n
}

func TestReplayReturnsStoredResponse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	first := f.post(t, f.player, "k1", `{"a":1}`)
	require.Equal(t, http.StatusCreated, first.status)
	require.False(t, first.replayed)

	// The quoted (structured-field) form names the same key.
	second := f.post(t, f.player, `"k1"`, `{"a":1}`)
	require.Equal(t, http.StatusCreated, second.status)
	require.True(t, second.replayed)
	require.Equal(t, first.body, second.body)
	require.Equal(t, first.header.Get("Location"), second.header.Get("Location"))
	require.Equal(t, "application/json", second.header.Get("Content-Type"))
	require.Equal(t, 1, f.effects(t))
	require.EqualValues(t, 1, f.calls.Load())
}

func TestConcurrentSameKeyRunsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	f.setHandler(f.effect(http.StatusCreated, 30*time.Millisecond))
	const n = 20
	results := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = f.post(t, f.player, "same-key", `{"mana":5}`)
		}()
	}
	close(start)
	awaitGroup(t, &wg, "the racing requests' answers")
	var created, replayed, inUse int
	var body string
	for _, r := range results {
		switch {
		case r.status == http.StatusCreated && !r.replayed:
			created++
			body = r.body
		case r.status == http.StatusCreated && r.replayed:
			replayed++
		case r.status == http.StatusConflict:
			require.Contains(t, r.body, `"idempotency_key_in_use"`)
			inUse++
		default:
			t.Fatalf("unexpected answer %d %s", r.status, r.body)
		}
	}
	require.Equal(t, 1, created, "exactly one request runs")
	require.Equal(t, n, created+replayed+inUse)
	require.Equal(t, 1, f.effects(t))
	for _, r := range results {
		if r.status == http.StatusCreated {
			require.Equal(t, body, r.body, "replays carry the first response")
		}
	}
	// After the dust settles every retry is a replay.
	again := f.post(t, f.player, "same-key", `{"mana":5}`)
	require.True(t, again.replayed)
	require.Equal(t, body, again.body)
	require.Equal(t, 1, f.effects(t))
	// Each replay wrote its count before it was answered.
	var replays int
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`SELECT replays FROM idempotency_keys WHERE key = 'same-key'`).Scan(&replays))
	require.Equal(t, replayed+1, replays)
}

func TestKeyReusedWithOtherRequestIs422(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	require.Equal(t, http.StatusCreated, f.post(t, f.player, "k", `{"mana":5}`).status)
	r := f.post(t, f.player, "k", `{"mana":6}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.status)
	require.Contains(t, r.body, `"idempotency_key_reused"`)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	require.Equal(t, 1, f.effects(t))
}

func TestKeysAreScopedPerPlayer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	bob, _, err := players.Create(context.Background(), f.pool, "bob")
	require.NoError(t, err)
	a := f.post(t, f.player, "shared", `{}`)
	b := f.post(t, bob.ID, "shared", `{}`)
	require.False(t, a.replayed)
	require.False(t, b.replayed)
	require.NotEqual(t, a.body, b.body)
	require.Equal(t, 2, f.effects(t))
}

func TestInvalidKeyIs400(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	for _, key := range []string{strings.Repeat("x", 256), `""`, "caf\u00e9", `"unterminated\"`} {
		r := f.post(t, f.player, key, `{}`)
		require.Equal(t, http.StatusBadRequest, r.status, key)
		require.Contains(t, r.body, `"invalid_idempotency_key"`)
	}
	require.Equal(t, http.StatusCreated, f.post(t, f.player, strings.Repeat("x", 255), `{}`).status)
	require.Equal(t, 1, f.effects(t))
}

func TestServerErrorIsNotCachedAndReleasesKey(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, idempotency.Options{})
			ok := f.effect(http.StatusCreated, 0)
			f.setHandler(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
				ok(httptest.NewRecorder(), r, tx) // the effect happens in tx ...
				http.Error(w, "boom", status)
			})
			require.Equal(t, status, f.post(t, f.player, "k", `{}`).status)
			require.Equal(t, 0, f.effects(t), "... and is rolled back with the 5xx")
			require.Equal(t, 0, f.keyCount(t, "running")+f.keyCount(t, "completed"), "the key is released")

			f.setHandler(ok)
			r := f.post(t, f.player, "k", `{}`)
			require.Equal(t, http.StatusCreated, r.status)
			require.False(t, r.replayed, "the retry ran again")
			require.Equal(t, 1, f.effects(t))
		})
	}
}

func TestClientErrorIsCached(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	f.setHandler(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		http.Error(w, "insufficient", http.StatusConflict)
	})
	require.Equal(t, http.StatusConflict, f.post(t, f.player, "k", `{}`).status)
	f.setHandler(f.effect(http.StatusCreated, 0))
	r := f.post(t, f.player, "k", `{}`)
	require.Equal(t, http.StatusConflict, r.status)
	require.True(t, r.replayed)
	require.Equal(t, 0, f.effects(t))
}

func TestPanicRollsBackAndReleases(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	ok := f.effect(http.StatusCreated, 0)
	f.setHandler(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		ok(httptest.NewRecorder(), r, tx)
		panic("handler bug")
	})
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/things", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("X-Player", strconv.FormatInt(f.player, 10))
	req.Header.Set("Idempotency-Key", "k")
	_, err = client.Do(req) // net/http aborts the connection on a panic
	require.Error(t, err)
	require.Equal(t, 0, f.effects(t))
	require.Equal(t, 0, f.keyCount(t, "running"))
	f.setHandler(ok)
	require.False(t, f.post(t, f.player, "k", `{}`).replayed)
	require.Equal(t, 1, f.effects(t))
}

// A response is never cached without its effect: a failing commit (here
// the handler broke its own transaction) answers 500 and releases the key.
func TestFailedCommitCachesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	ok := f.effect(http.StatusCreated, 0)
	f.setHandler(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		ok(w, r, tx)
		_, _ = tx.Exec(r.Context(), `SELECT 1/0`) // aborts the transaction
	})
	r := f.post(t, f.player, "k", `{}`)
	require.Equal(t, http.StatusInternalServerError, r.status)
	require.Equal(t, 0, f.effects(t))
	require.Equal(t, 0, f.keyCount(t, "running")+f.keyCount(t, "completed"))
}

func TestRequestsWithoutKeyRunInATransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	require.False(t, f.post(t, f.player, "", `{}`).replayed)
	require.False(t, f.post(t, f.player, "", `{}`).replayed)
	require.Equal(t, 2, f.effects(t))
	ok := f.effect(http.StatusCreated, 0)
	f.setHandler(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		ok(httptest.NewRecorder(), r, tx)
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	require.Equal(t, http.StatusInternalServerError, f.post(t, f.player, "", `{}`).status)
	require.Equal(t, 2, f.effects(t))
	require.Equal(t, 0, f.keyCount(t, "completed"))
}

func TestBodyTooLargeIs413(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{MaxBodyBytes: 64})
	r := f.post(t, f.player, "k", strings.Repeat("x", 65))
	require.Equal(t, http.StatusRequestEntityTooLarge, r.status)
	require.Equal(t, 0, f.effects(t))
	require.Equal(t, 0, f.keyCount(t, "running"))
}
