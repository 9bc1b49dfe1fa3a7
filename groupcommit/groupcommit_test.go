package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/groupcommit"
)

// recorder is a Func that doubles its inputs slowly and records the batches.
type recorder struct {
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
	time.Sleep(2 * time.Millisecond) // a commit: callers queue meanwhile
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

func TestConcurrentCallersShareBatchesAndGetTheirOwnResults(t *testing.T) {
	t.Parallel()
	var r recorder
	b := groupcommit.New(r.fn, groupcommit.Options{MaxBatch: 16, Concurrency: 2})
	const n = 400
	var wg sync.WaitGroup
	got := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = b.Do(t.Context(), i) })
	}
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
	require.LessOrEqual(t, biggest, 16, "MaxBatch")
	require.Greater(t, biggest, 1, "callers that queue behind a running batch go together")
	require.Less(t, len(r.sizes), n, "fewer batches than callers")
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
		time.Sleep(time.Millisecond)
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
	release := make(chan struct{})
	var ran atomic.Int32
	b := groupcommit.New(func(ctx context.Context, in []int) ([]int, []error, error) {
		<-release
		ran.Add(int32(len(in)))
		require.NoError(t, ctx.Err(), "the batch does not inherit a caller's cancellation")
		return in, make([]error, len(in)), nil
	}, groupcommit.Options{Concurrency: 1})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := b.Do(ctx, 1); done <- err }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	close(release)
	require.Eventually(t, func() bool { return ran.Load() == 1 }, 5*time.Second, time.Millisecond,
		"the abandoned input still runs: callers must be idempotent")
}
