package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fibe-dev/billing/fibe"
)

// Outcome is what the client learned of an operation.
type Outcome string

// An operation is ok (billing acknowledged it: a 2xx), fail (a definite
// refusal: a 4xx that is not "try again") or unknown (no answer, a 5xx,
// a 409 in use or a 429 to the end: it may or may not have taken effect).
const (
	OK      Outcome = "ok"
	Fail    Outcome = "fail"
	Unknown Outcome = "unknown"
)

// outcomeOf classifies one answer the way the SDK does (status 0: none):
// a 409 is a refusal unless it says the key is still in use, and 408 and
// 429 are "try again".
func outcomeOf(status int, body []byte) Outcome {
	switch {
	case status/100 == 2:
		return OK
	case status == http.StatusConflict:
		if bytes.Contains(body, []byte(`"code":"idempotency_key_in_use"`)) {
			return Unknown
		}
		return Fail
	case status/100 == 4 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout:
		return Fail
	}
	return Unknown
}

// op is one SDK mutation of the workload, by its Idempotency-Key, with
// the last answer any of its attempts got.
type op struct {
	key, auth, method, path string
	body                    []byte
	status                  int
	answer                  []byte
	outcome                 Outcome
	resolved                bool // it was unknown after the load, and replayed
}

// history records every SDK mutation of a failover run, through the
// SDK's HTTP transport: the SDK sends one key on every attempt of one
// operation, so the last attempt's answer is the operation's outcome.
type history struct {
	mu    sync.Mutex
	ops   map[string]*op
	order []*op
	// hooks: provider event id -> acknowledged, for every delivery.
	hooks map[string]bool
}

func newHistory() *history { return &history{ops: map[string]*op{}, hooks: map[string]bool{}} }

// transport records each POST carrying an Idempotency-Key, then lets next
// send it.
func (h *history) transport(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		key := req.Header.Get("Idempotency-Key")
		if req.Method != http.MethodPost || key == "" {
			return next.RoundTrip(req)
		}
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		o := h.begin(key, req.Header.Get("Authorization"), req.Method, req.URL.Path, body)
		resp, err := next.RoundTrip(req)
		if err != nil {
			h.answer(o, 0, nil)
			return nil, err
		}
		answer, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		if rerr != nil {
			h.answer(o, 0, nil)
			return nil, rerr
		}
		h.answer(o, resp.StatusCode, answer)
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (h *history) begin(key, auth, method, path string, body []byte) *op {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.ops[key]; o != nil {
		return o
	}
	o := &op{key: key, auth: auth, method: method, path: path, body: body, outcome: Unknown}
	h.ops[key] = o
	h.order = append(h.order, o)
	return o
}

func (h *history) answer(o *op, status int, body []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.status, o.answer, o.outcome = status, body, outcomeOf(status, body)
}

// delivered records whether some copy of a provider event was answered 2xx.
func (h *history) delivered(eventID string, acked bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hooks[eventID] = h.hooks[eventID] || acked
}

// snapshot returns a copy of every operation, in the order first sent.
func (h *history) snapshot() []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]op, len(h.order))
	for i, o := range h.order {
		out[i] = *o
	}
	return out
}

// tally counts the operations by outcome.
func (h *history) tally() map[Outcome]int {
	out := map[Outcome]int{}
	for _, o := range h.snapshot() {
		out[o.outcome]++
	}
	return out
}

// resolve replays every unknown operation with its own key, straight to a
// web process, until billing answers it definitely (the stored answer, or
// the operation run now for the first time): afterwards every operation
// is ok or fail. A key whose request was cut off by a failover stays "in
// use" (409) until its claim is taken over, a minute after it was made
// (idempotency.DefaultLockTimeout), so the replays run concurrently. It
// returns how many it resolved and how many stay unknown at the deadline.
func (r *Run) resolve(ctx context.Context, within time.Duration) (resolved, left int) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	h := r.fo.history
	h.mu.Lock()
	var unknown []*op
	for _, o := range h.order {
		if o.outcome == Unknown {
			unknown = append(unknown, o)
		}
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, o := range unknown {
		wg.Go(func() {
			status, answer := r.replay(ctx, o)
			h.mu.Lock()
			defer h.mu.Unlock()
			o.status, o.answer, o.outcome = status, answer, outcomeOf(status, answer)
			o.resolved = o.outcome != Unknown
		})
	}
	wg.Wait()
	for _, o := range unknown {
		if o.resolved {
			resolved++
		} else {
			left++
			r.logf("still unknown: %s", o)
		}
	}
	return resolved, left
}

// replay sends o again until a definite answer or ctx's end.
func (r *Run) replay(ctx context.Context, o *op) (int, []byte) {
	last := ""
	for attempt := 0; ; attempt++ {
		webs := r.liveWebAddrs()
		if len(webs) > 0 {
			req, _ := http.NewRequestWithContext(ctx, o.method, "http://"+webs[attempt%len(webs)]+o.path, bytes.NewReader(o.body))
			req.Header.Set("Authorization", o.auth)
			req.Header.Set("Idempotency-Key", o.key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := r.hc.Do(req)
			if err == nil {
				answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				if outcomeOf(resp.StatusCode, answer) != Unknown {
					return resp.StatusCode, answer
				}
				last = fmt.Sprintf("%d %s", resp.StatusCode, truncate(answer))
			} else {
				last = err.Error()
			}
		}
		select {
		case <-ctx.Done():
			r.logf("replay of %s: last answer %s", o, last)
			return 0, nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// sdkOptions are the SDK options a run adds: in a failover run, the
// history's recording transport.
func (r *Run) sdkOptions() []fibe.Option {
	if r.fo == nil {
		return nil
	}
	return []fibe.Option{fibe.WithHTTPClient(&http.Client{Transport: r.fo.history.transport(http.DefaultTransport)})}
}

// noteDelivery records a provider event's delivery in a failover run's
// history.
func (r *Run) noteDelivery(eventID string, acked bool) {
	if r.fo != nil {
		r.fo.history.delivered(eventID, acked)
	}
}

// kind names an operation by its route, ids left out.
func (o op) kind() string {
	parts := strings.Split(strings.Trim(o.path, "/"), "/")
	for i, p := range parts {
		if p != "" && strings.Trim(p, "0123456789") == "" {
			parts[i] = "{id}"
		}
	}
	return o.method + " /" + strings.Join(parts, "/")
}

func (o op) String() string {
	return fmt.Sprintf("%s key %s: %s (%d)", o.kind(), o.key, o.outcome, o.status)
}
