package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/fibe-dev/billing/fibe"
	"github.com/fibe-dev/billing/internal/events"
)

// The runs' processes deliver events on a short schedule and timeout
// (BILLING_EVENTS_RETRY_SCHEDULE, BILLING_EVENTS_TIMEOUT): under the
// faults a delivery may fail a few times in a row (the receiver's answer,
// then a worker killed under it, then a database restart), and every
// retry must still fall inside the settle window. The whole schedule is
// 31 s of waits over 9 attempts.
const (
	eventsTimeout  = 2 * time.Second
	eventsSchedule = "1s,2s,3s,5s,5s,5s,5s,5s"
)

// receiver plays a service of the platform that consumes the events billing
// sends, and a flaky one: the first attempt of each event is answered, at
// random (seeded), 500, slowly, not within billing's request timeout, or
// 200; every later attempt 200. It verifies each delivery with the SDK and
// records, per webhook-id, every distinct body it carried and whether one
// was acknowledged. What it answers first is the fault; that every event
// still arrives, under one body, is the check (checkSentEvents).
type receiver struct {
	v      *fibe.WebhookVerifier
	hang   time.Duration // longer than billing's request timeout (eventsTimeout)
	slow   time.Duration // the longest slow answer, well inside it
	mu     sync.Mutex
	rng    *rand.Rand
	seen   map[string]*received
	bad    int // deliveries that did not verify
	faults map[string]int
	srv    *http.Server
	url    string
}

type received struct {
	typ      string
	bodies   map[[sha256.Size]byte]bool
	attempts int
	acked    bool
}

// startReceiver listens on loopback, registers itself with billing as an
// endpoint for every event type, and verifies with the secret billing
// made for it.
func (r *Run) startReceiver(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	rc := &receiver{rng: rand.New(rand.NewPCG(uint64(r.opts.Seed), 30)), seen: map[string]*received{},
		faults: map[string]int{}, hang: eventsTimeout + time.Second, slow: eventsTimeout / 2, url: "http://" + ln.Addr().String() + "/events"}
	added, err := events.AddEndpoint(ctx, r.pool, rc.url, nil)
	if err != nil {
		ln.Close()
		return fmt.Errorf("e2e: register the events receiver: %w", err)
	}
	if rc.v, err = fibe.NewWebhookVerifier(added.Secret); err != nil {
		ln.Close()
		return err
	}
	rc.srv = &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = rc.srv.Serve(ln) }()
	r.events = rc
	return nil
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	ev, err := rc.v.Verify(req.Header, body)
	if err != nil {
		rc.mu.Lock()
		rc.bad++
		rc.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch fault := rc.record(ev, body); fault {
	case "500":
		http.Error(w, "flaky consumer", http.StatusInternalServerError)
		return
	case "slow":
		time.Sleep(rc.slow/4 + time.Duration(rc.intn(int(rc.slow/time.Millisecond)*3/4))*time.Millisecond)
	case "hang":
		// billing gives up first; an answer it never read is no
		// acknowledgement.
		select {
		case <-time.After(rc.hang):
		case <-req.Context().Done():
			return
		}
	}
	rc.ack(ev.ID)
	w.WriteHeader(http.StatusNoContent)
}

// record notes a verified delivery and picks the fault its answer carries:
// only an event's first attempt may fail.
func (rc *receiver) record(ev *fibe.Event, body []byte) string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	got := rc.seen[ev.ID]
	if got == nil {
		got = &received{typ: ev.Type, bodies: map[[sha256.Size]byte]bool{}}
		rc.seen[ev.ID] = got
	}
	got.bodies[sha256.Sum256(body)] = true
	got.attempts++
	if got.attempts > 1 {
		return ""
	}
	fault := ""
	switch n := rc.rng.IntN(100); {
	case n < 15:
		fault = "500"
	case n < 20:
		fault = "slow"
	case n < 23:
		fault = "hang"
	}
	if fault != "" {
		rc.faults[fault]++
	}
	return fault
}

func (rc *receiver) ack(id string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.seen[id].acked = true
}

func (rc *receiver) intn(n int) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.rng.IntN(n)
}

func (rc *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), rc.hang+5*time.Second)
	defer cancel()
	_ = rc.srv.Shutdown(ctx)
}

// checkSentEvents judges the events billing sent during the run: every
// event written (each in its effect's transaction) reached the receiver and
// was acknowledged at least once (but fresh churn), no webhook-id ever carried two different
// bodies, every delivery verified with the SDK, and what the receiver was
// sent is exactly what is stored (no event delivered that no effect wrote).
func (r *Run) checkSentEvents(ctx context.Context, rep *Report) error {
	// An event the system wrote by itself after the load, within the
	// churn window before the workers froze (a periodic sweep's funding),
	// may still wait for its delivery, as such jobs may (pendingSQL).
	rows, err := r.pool.Query(ctx, `SELECT id, created_at >= $1 AND created_at > $2::timestamptz - make_interval(secs => $3)
		FROM events ORDER BY id`, r.loadEnd, r.frozenAt, churnWindow.Seconds())
	if err != nil {
		return err
	}
	stored, churn := map[string]bool{}, map[string]bool{}
	for rows.Next() {
		var id string
		var fresh bool
		if err := rows.Scan(&id, &fresh); err != nil {
			return err
		}
		stored[id], churn[id] = true, fresh
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rc := r.events
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var missing, twoBodies, unknown []string
	for id := range stored {
		if got := rc.seen[id]; (got == nil || !got.acked) && !churn[id] {
			missing = append(missing, id)
		}
	}
	for id, got := range rc.seen {
		if len(got.bodies) > 1 {
			twoBodies = append(twoBodies, id)
		}
		if !stored[id] {
			unknown = append(unknown, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(twoBodies)
	sort.Strings(unknown)
	rep.check(fmt.Sprintf("events: every stored event delivered at least once (%d stored, %d received; first attempts answered 500: %d, slowly: %d, past the timeout: %d)",
		len(stored), len(rc.seen), rc.faults["500"], rc.faults["slow"], rc.faults["hang"]),
		len(stored) > 0 && len(missing) == 0, fmt.Sprintf("not delivered: %v", first(missing, 5)))
	rep.check("events: one body per webhook-id", len(twoBodies) == 0, fmt.Sprintf("ids with two bodies: %v", first(twoBodies, 5)))
	rep.check("events: every delivery verified, none for an unstored event", rc.bad == 0 && len(unknown) == 0,
		fmt.Sprintf("%d failed verification; delivered but not stored: %v", rc.bad, first(unknown, 5)))
	return nil
}
