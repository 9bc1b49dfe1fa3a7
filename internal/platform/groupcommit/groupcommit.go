// Package groupcommit runs the work of concurrent callers in shared batches,
// so that many small units of work share one database transaction: one
// BEGIN, a few statements over arrays, one COMMIT (one WAL flush) for the
// batch instead of one per caller.
//
// It is PostgreSQL's group commit moved up a level. There is no timer and
// no linger: a caller that arrives while no batch is running runs at once,
// alone, with no added latency; callers that arrive while batches are
// running wait and go together in the next one. Batches therefore grow
// exactly as far as the load makes callers queue, and no further.
//
// A Batcher holds no goroutine while idle: runners are started by Do when
// work arrives and exit when the queue is empty, so it needs no Close.
package groupcommit

import (
	"context"
	"fmt"
	"sync"
)

// Func does the work of a batch. It returns one result and one error per
// input, in order (len(out) == len(errs) == len(in)), or a non-nil err that
// fails every input of the batch. Its ctx belongs to no caller (a batch must
// not fail because one caller gave up), so fn bounds its own time.
type Func[In, Out any] func(ctx context.Context, in []In) (out []Out, errs []error, err error)

// Options size a Batcher.
type Options struct {
	// MaxBatch caps the inputs of one batch (default 64).
	MaxBatch int
	// Concurrency is how many batches may run at once (default 2): one
	// commits while the next gathers, and each holds one connection.
	Concurrency int
	// OnQueued, when set, is called by every Do once its input is queued,
	// with the number of inputs waiting for a batch then: an explicit
	// signal ("N callers are queued") for tests, instead of sleeping.
	OnQueued func(waiting int)
}

// Batcher collects concurrent Do calls into batches run by fn.
type Batcher[In, Out any] struct {
	fn   Func[In, Out]
	opts Options

	mu      sync.Mutex
	queue   []*call[In, Out]
	running int
}

type call[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{}
}

// New returns a Batcher running fn.
func New[In, Out any](fn Func[In, Out], opts Options) *Batcher[In, Out] {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 64
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 2
	}
	return &Batcher[In, Out]{fn: fn, opts: opts}
}

// Do adds in to the next batch and waits for its result. When ctx ends
// first Do returns ctx.Err(), but in may still be, or have been, committed
// by its batch: callers must be idempotent, which is why they batch at all.
func (b *Batcher[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	c := &call[In, Out]{in: in, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	waiting := len(b.queue)
	if b.running < b.opts.Concurrency {
		b.running++
		go b.run()
	}
	b.mu.Unlock()
	if b.opts.OnQueued != nil {
		b.opts.OnQueued(waiting)
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		var zero Out
		return zero, ctx.Err()
	}
}

// run takes batches off the queue until it is empty.
func (b *Batcher[In, Out]) run() {
	for {
		batch := b.next()
		if batch == nil {
			return
		}
		b.exec(batch)
	}
}

// next removes up to MaxBatch calls from the queue, or stops this runner
// (nil) when the queue is empty.
func (b *Batcher[In, Out]) next() []*call[In, Out] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.running--
		return nil
	}
	n := min(len(b.queue), b.opts.MaxBatch)
	batch := b.queue[:n:n]
	b.queue = append([]*call[In, Out](nil), b.queue[n:]...)
	return batch
}

func (b *Batcher[In, Out]) exec(batch []*call[In, Out]) {
	in := make([]In, len(batch))
	for i, c := range batch {
		in[i] = c.in
	}
	out, errs, err := b.call(in)
	if err == nil && (len(out) != len(in) || len(errs) != len(in)) {
		err = fmt.Errorf("groupcommit: batch of %d returned %d results and %d errors", len(in), len(out), len(errs))
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.out, c.err = out[i], errs[i]
		}
		close(c.done)
	}
}

// call runs fn, turning a panic into an error for the whole batch: the
// callers must not wait forever for a runner that died.
func (b *Batcher[In, Out]) call(in []In) (out []Out, errs []error, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("groupcommit: batch panicked: %v", r)
		}
	}()
	return b.fn(context.Background(), in)
}
