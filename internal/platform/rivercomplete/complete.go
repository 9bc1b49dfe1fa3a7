// Package rivercomplete completes running River jobs, each with its output,
// inside the caller's transaction: the one seam between billing and River's
// unstable internals.
//
// River's public way is river.JobCompleteTx, one statement per job. A
// group-committed batch of jobs (enforcer's fund_day) would pay one round
// trip per job for it, serialised inside the batch's transaction. ModePilot
// instead runs the statement JobCompleteTx runs (the pilot's
// JobSetStateIfRunningMany) once, given every job; River documents the
// pilot and the driver's UnwrapExecutor as "API is not stable", so this
// package is the only caller, its contract test pins the meaning billing
// relies on, and ModePerJob (river.JobCompleteTx per job, same transaction)
// is the fallback an upgrade can switch to with one setting
// (BILLING_BATCH_COMPLETE=per_job).
package rivercomplete

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// Mode is how a batch of jobs is completed.
type Mode string

// Modes.
const (
	// ModePilot completes the whole batch in one statement (the default).
	ModePilot Mode = "pilot"
	// ModePerJob completes each job with river.JobCompleteTx.
	ModePerJob Mode = "per_job"
)

// ErrNotRunning is returned when a job to complete is no longer running
// (cancelled, rescued or completed meanwhile): it was left as it was, and
// the caller must roll its transaction back.
var ErrNotRunning = errors.New("rivercomplete: job is no longer running")

// ErrMode is returned by ParseMode for an unknown mode.
var ErrMode = errors.New("rivercomplete: mode must be pilot or per_job")

// ParseMode parses a Mode; "" is ModePilot.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModePilot:
		return ModePilot, nil
	case ModePerJob:
		return ModePerJob, nil
	}
	return "", fmt.Errorf("%w: %q", ErrMode, s)
}

// Job is one running job to complete with its output (recorded under the
// job's metadata "output", as river.RecordOutput records it). Ctx is the
// job's work context: River's client and the job's metadata live there.
type Job[T river.JobArgs] struct {
	Ctx    context.Context
	Job    *river.Job[T]
	Output any
}

// Complete completes every job in tx, or returns an error (ErrNotRunning
// when one of them is no longer running) after which tx must be rolled
// back.
func Complete[T river.JobArgs](ctx context.Context, tx pgx.Tx, mode Mode, jobs []Job[T]) error {
	if len(jobs) == 0 {
		return nil
	}
	if mode == ModePerJob {
		return completeEach(tx, jobs)
	}
	return completeMany(ctx, tx, jobs)
}

// completeEach is the public API's way: one river.JobCompleteTx per job.
func completeEach[T river.JobArgs](tx pgx.Tx, jobs []Job[T]) error {
	for _, j := range jobs {
		// RecordOutput writes the job's metadata map, which River's executor
		// reads once Work returns: a job whose work context has ended is
		// returning (or has returned) its error, so it is refused rather than
		// raced with; the caller rolls back and River retries it.
		if err := j.Ctx.Err(); err != nil {
			return fmt.Errorf("rivercomplete: job %d gave up: %w", j.Job.ID, err)
		}
		if err := river.RecordOutput(j.Ctx, j.Output); err != nil {
			return fmt.Errorf("rivercomplete: record output of job %d: %w", j.Job.ID, err)
		}
		done, err := river.JobCompleteTx[*riverpgxv5.Driver](j.Ctx, tx, j.Job)
		if err != nil {
			return fmt.Errorf("rivercomplete: complete job %d: %w", j.Job.ID, err)
		}
		if done.State != rivertype.JobStateCompleted {
			return fmt.Errorf("%w: job %d is %s", ErrNotRunning, j.Job.ID, done.State)
		}
	}
	return nil
}

// completeMany runs JobCompleteTx's statement once for every job.
func completeMany[T river.JobArgs](ctx context.Context, tx pgx.Tx, jobs []Job[T]) error {
	client := river.ClientFromContext[pgx.Tx](jobs[0].Ctx)
	params, err := manyParams(jobs, time.Now())
	if err != nil {
		return err
	}
	rows, err := client.Pilot().JobSetStateIfRunningMany(ctx, client.Driver().UnwrapExecutor(tx), params)
	if err != nil {
		return fmt.Errorf("rivercomplete: complete %d jobs: %w", len(jobs), err)
	}
	completed := 0
	for _, r := range rows {
		if r.State == rivertype.JobStateCompleted {
			completed++
		}
	}
	if completed != len(jobs) {
		return fmt.Errorf("%w: completed %d of %d jobs", ErrNotRunning, completed, len(jobs))
	}
	return nil
}

// manyParams builds, for every job, the parameters JobCompleteTx builds for
// one (riverdriver.JobSetStateCompleted), with the output as its metadata.
func manyParams[T river.JobArgs](jobs []Job[T], now time.Time) (*riverdriver.JobSetStateIfRunningManyParams, error) {
	p := &riverdriver.JobSetStateIfRunningManyParams{}
	for _, j := range jobs {
		output, err := json.Marshal(map[string]any{rivertype.MetadataKeyOutput: j.Output})
		if err != nil {
			return nil, fmt.Errorf("rivercomplete: output of job %d: %w", j.Job.ID, err)
		}
		one := riverdriver.JobSetStateCompleted(j.Job.ID, now, output)
		p.ID = append(p.ID, one.ID)
		p.Attempt = append(p.Attempt, one.Attempt)
		p.ErrData = append(p.ErrData, one.ErrData)
		p.FinalizedAt = append(p.FinalizedAt, one.FinalizedAt)
		p.MetadataDoMerge = append(p.MetadataDoMerge, one.MetadataDoMerge)
		p.MetadataUpdates = append(p.MetadataUpdates, one.MetadataUpdates)
		p.ScheduledAt = append(p.ScheduledAt, one.ScheduledAt)
		p.State = append(p.State, one.State)
	}
	return p, nil
}
