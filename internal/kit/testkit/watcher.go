package testkit

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// Job is a job as the watcher last saw it finish an attempt.
type Job struct {
	ID     int64
	Kind   string
	State  rivertype.JobState
	Args   []byte
	Errors []string // every attempt's error, oldest first
}

// Final reports whether the job will not run again.
func (j Job) Final() bool {
	return j.State == rivertype.JobStateCompleted || j.State == rivertype.JobStateCancelled ||
		j.State == rivertype.JobStateDiscarded
}

// Watcher follows the jobs a River client works, through River's event
// subscription (no polling of river_job). Jobs are indexed by kind and by
// each string argument, so a wait costs a lookup, not a scan.
type Watcher struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event
	jobs    map[int64]Job
	index   map[Match]map[int64]bool
	cancel  func()
	done    chan struct{}
}

func watch(client *river.Client[pgx.Tx]) *Watcher {
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 100_000, Kinds: []river.EventKind{
		river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed, river.EventKindJobSnoozed}})
	w := &Watcher{changed: make(chan struct{}), jobs: map[int64]Job{}, index: map[Match]map[int64]bool{},
		cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range events {
			w.record(ev.Job)
		}
	}()
	return w
}

func (w *Watcher) stop() { w.cancel(); <-w.done }

func (w *Watcher) record(row *rivertype.JobRow) {
	j := Job{ID: row.ID, Kind: row.Kind, State: row.State, Args: row.EncodedArgs}
	for _, e := range row.Errors {
		j.Errors = append(j.Errors, e.Error)
	}
	keys := []Match{Kind(row.Kind)}
	var args map[string]any
	_ = json.Unmarshal(row.EncodedArgs, &args)
	for name, v := range args {
		if s, ok := v.(string); ok {
			keys = append(keys, KindWithArg(row.Kind, name, s))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.jobs[row.ID] = j
	for _, k := range keys {
		if w.index[k] == nil {
			w.index[k] = map[int64]bool{}
		}
		w.index[k][row.ID] = true
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// Match selects jobs: of a kind, and with one string argument.
type Match struct{ kind, arg, value string }

// Kind matches the jobs of kind.
func Kind(kind string) Match { return Match{kind: kind} }

// KindWithArg matches the jobs of kind whose args hold "name": "value".
func KindWithArg(kind, name, value string) Match { return Match{kind: kind, arg: name, value: value} }

// DefaultWait bounds a wait for jobs when the caller names no timeout:
// testdb.WorkDeadline, as for every wait for background work. A wait ends
// as soon as its jobs are final (or at once on a failure it is told to
// fail on).
const DefaultWait = testdb.WorkDeadline

// WaitOptions bound a wait.
type WaitOptions struct {
	Timeout time.Duration // 0: DefaultWait
	// Strict fails at once on any failed attempt of a matching job: for
	// tests in which no job is meant to fail. Without it the wait fails
	// at once only on a constraint violation (SQLSTATE class 23), which
	// no retry can mend.
	Strict bool
}

// Wait waits until exactly n jobs match and all of them are final, and
// returns them by id. It fails the test at the deadline, or at once on a
// failure no retry mends.
func (w *Watcher) Wait(t testing.TB, match Match, n int, o WaitOptions) []Job {
	t.Helper()
	jobs, err := w.Await(match, n, o)
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// Await is Wait for any goroutine: it returns an error instead.
func (w *Watcher) Await(match Match, n int, o WaitOptions) ([]Job, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultWait
	}
	deadline := time.After(o.Timeout)
	for {
		jobs, changed := w.matching(match)
		if err := hopeless(jobs, o.Strict); err != nil {
			return nil, err
		}
		if len(jobs) > n {
			return nil, fmt.Errorf("testkit: %d jobs wanted, saw %d: %+v", n, len(jobs), jobs)
		}
		if done(jobs, n) {
			return jobs, nil
		}
		select {
		case <-changed:
		case <-deadline:
			return nil, fmt.Errorf("testkit: %d jobs wanted final within %s, saw %+v", n, o.Timeout, jobs)
		}
	}
}

func (w *Watcher) matching(match Match) ([]Job, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Job
	for id := range w.index[match] {
		out = append(out, w.jobs[id])
	}
	slices.SortFunc(out, func(a, b Job) int { return int(a.ID - b.ID) })
	return out, w.changed
}

func done(jobs []Job, n int) bool {
	if len(jobs) != n {
		return false
	}
	for _, j := range jobs {
		if !j.Final() {
			return false
		}
	}
	return true
}

func hopeless(jobs []Job, strict bool) error {
	for _, j := range jobs {
		for i, e := range j.Errors {
			// A cancel's error is the job's last: it ended on purpose.
			failed := !(j.State == rivertype.JobStateCancelled && i == len(j.Errors)-1)
			if strings.Contains(e, "(SQLSTATE 23") || strict && failed {
				return fmt.Errorf("testkit: %s job %d failed, which no retry mends: %s", j.Kind, j.ID, e)
			}
		}
	}
	return nil
}
