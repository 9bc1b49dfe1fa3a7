package jobs

import (
	"context"

	"github.com/riverqueue/river"
)

// NoopArgs is a job that does nothing. It measures River's own throughput on
// this database (the baseline bench/ compares domain jobs against) and is a
// cheap end-to-end probe that a worker is alive.
type NoopArgs struct{}

// Kind implements river.JobArgs.
func (NoopArgs) Kind() string { return "noop" }

// NoopWorker works NoopArgs.
type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

// Work implements river.Worker.
func (NoopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

// RegisterNoop adds the no-op worker to workers, the way every package
// registers its workers (cmd/billing's registry calls each); it declares
// no periodic job.
func RegisterNoop(workers *river.Workers) []*river.PeriodicJob {
	river.AddWorker(workers, &NoopWorker{})
	return nil
}
