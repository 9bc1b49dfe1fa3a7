package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/platform/groupcommit"
)

// recorder is a Func that doubles its inputs and records the batches. With
// a gate, every batch waits for it to close (a commit that callers queue
// behind).
type recorder struct {
	gate     chan struct{}
	mu       sync.Mutex
	sizes    []int
	inFlight atomic.Int32
	maxSeen  atomic.Int32
}

func (r *recorder) fn(_ context.Context, in []int) ([]int, []error, error) {
	n := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for {
		m := r.maxSeen.Load()
		if n <= m || r.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	r.sizes = append(r.sizes, len(in))
	r.mu.Unlock()
	out, errs := make([]int, len(in)), make([]error, len(in))
	for i, v := range in {
		if v%7 == 0 {
			errs[i] = errors.New("sevens fail alone")
			continue
		}
		out[i] = 2 * v
	}
	return out, errs, nil
}

// queuedAfter returns an OnQueued hook and a channel closed once n inputs
// have been queued.
func queuedAfter(n int32) (func(int), <-chan struct{}) {
	var arrived atomic.Int32
	all := make(chan struct{})
	return func(int) {
		if arrived.Add(1) == n {
			close(all)
		}
	}, all
}

// wait fails the test (from its own goroutine) unless ch closes in time.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		require.FailNow(t, "timed out waiting: "+what)
	}
}

// TestConcurrentCallersShareBatchesAndGetTheirOwnResults holds the first
// batches open until all n callers are queued (the OnQueued hook says so),
// then lets them run: the callers queued behind them go together in full
// batches, and each gets its own result.
func TestConcurrentCallersShareBatchesAndGetTheirOwnResults(t *testing.T) {
	t.Parallel()
	const n = 400
	r := recorder{gate: make(chan struct{})}
	onQueued, allQueued := queuedAfter(n)
	b := groupcommit.New(r.fn, groupcommit.Options{MaxBatch: 16, Concurrency: 2, OnQueued: onQueued})
	var wg sync.WaitGroup
	got := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = b.Do(t.Context(), i) })
	}
	wait(t, allQueued, "every caller queued")
	close(r.gate)
	wg.Wait()
	for i := range n {
		if i%7 == 0 {
			require.EqualError(t, errs[i], "sevens fail alone", "input %d", i)
			continue
		}
		require.NoError(t, errs[i], "input %d", i)
		require.Equal(t, 2*i, got[i], "input %d got another caller's result", i)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	total, biggest := 0, 0
	for _, s := range r.sizes {
		total += s
		biggest = max(biggest, s)
	}
	require.Equal(t, n, total, "every input runs in exactly one batch")
	require.Equal(t, 16, biggest, "callers queued behind running batches go together, up to MaxBatch")
	// At most two batches ran before the others queued; every later one
	// found at least 16 waiting but the last.
	require.LessOrEqual(t, len(r.sizes), 2+(n+15)/16, "batches %v", r.sizes)
	require.LessOrEqual(t, r.maxSeen.Load(), int32(2), "Concurrency")
}

func TestALoneCallerRunsAtOnce(t *testing.T) {
	t.Parallel()
	var r recorder
	b := groupcommit.New(r.fn, groupcommit.Options{})
	for i := 1; i <= 3; i++ {
		start := time.Now()
		v, err := b.Do(t.Context(), i)
		require.NoError(t, err)
		require.Equal(t, 2*i, v)
		require.Less(t, time.Since(start), time.Second)
	}
	require.Equal(t, []int{1, 1, 1}, r.sizes, "no linger: a caller alone is a batch of one")
}

func TestBatchErrorFailsEveryCaller(t *testing.T) {
	t.Parallel()
	boom := errors.New("commit failed")
	b := groupcommit.New(func(context.Context, []string) ([]int, []error, error) {
		return nil, nil, boom
	}, groupcommit.Options{Concurrency: 1})
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 20 {
		wg.Go(func() {
			if _, err := b.Do(t.Context(), "x"); errors.Is(err, boom) {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(20), failed.Load())
}

func TestWrongResultCountAndPanicAreErrorsNotHangs(t *testing.T) {
	t.Parallel()
	short := groupcommit.New(func(_ context.Context, in []int) ([]int, []error, error) {
		return in[:0], nil, nil
	}, groupcommit.Options{})
	_, err := short.Do(t.Context(), 1)
	require.ErrorContains(t, err, "returned 0 results")

	panicky := groupcommit.New(func(context.Context, []int) ([]int, []error, error) {
		panic("bug")
	}, groupcommit.Options{})
	_, err = panicky.Do(t.Context(), 1)
	require.ErrorContains(t, err, "panicked: bug")
	// The runner survived the panic's batch bookkeeping: a later call runs.
	_, err = panicky.Do(t.Context(), 2)
	require.ErrorContains(t, err, "panicked")
}

func TestCallerContextEndsTheWaitNotTheBatch(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	ran := make(chan error, 1) // the batch's ctx.Err() and how many it ran
	var size atomic.Int32
	b := groupcommit.New(func(ctx context.Context, in []int) ([]int, []error, error) {
		close(started)
		<-release
		size.Store(int32(len(in)))
		ran <- ctx.Err()
		return in, make([]error, len(in)), nil
	}, groupcommit.Options{Concurrency: 1})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := b.Do(ctx, 1); done <- err }()
	wait(t, started, "the batch started")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	close(release)
	select {
	case err := <-ran:
		require.NoError(t, err, "the batch does not inherit a caller's cancellation")
	case <-time.After(2 * time.Minute):
		require.FailNow(t, "the abandoned input never ran")
	}
	require.Equal(t, int32(1), size.Load(), "the abandoned input still runs: callers must be idempotent")
}
