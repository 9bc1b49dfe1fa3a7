// Package requests keeps the API's accepted work: a 202's request id names
// the River job doing the work, recorded in api_requests in the same
// transaction that inserts the job, and read back as one of five statuses.
package requests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/errcode"
)

// Statuses of a request.
const (
	Queued    = "queued"
	Running   = "running"
	Succeeded = "succeeded"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// Errors. Compare with errors.Is.
var (
	// ErrNotFound: no such request, or another player's.
	ErrNotFound = errcode.New("requests: no such request", errcode.NotFound)
	// ErrExpired: the request's job was deleted after River's retention
	// (24 h for completed jobs); the request can no longer be reported.
	ErrExpired = errcode.New("requests: this request is too old to be reported", errcode.Answer{
		Status: http.StatusNotFound, Code: "not_found", Detail: "this request is too old to be reported"})
)

// Request is one accepted piece of work as its caller sees it.
type Request struct {
	ID     int64
	Kind   string
	Target string
	Status string
	Result json.RawMessage // the job's output once it succeeded, else JSON null
	Error  string          // the last attempt's error while it is not done
}

// JobGetter reads a River job: a *river.Client.
type JobGetter interface {
	JobGet(ctx context.Context, id int64) (*rivertype.JobRow, error)
}

// RecordTx records the request of job jobID, inserted in tx, and returns
// its id.
func RecordTx(ctx context.Context, tx pgx.Tx, player int64, kind, target string, jobID int64, now time.Time) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO api_requests (player_id, kind, target, job_id, created_at)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`, player, kind, target, jobID, now).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("requests: record: %w", err)
	}
	return id, nil
}

// Get returns player's request id with its job's status.
func Get(ctx context.Context, db dbtx.DB, jobs JobGetter, player, id int64) (*Request, error) {
	req := &Request{ID: id, Result: json.RawMessage("null")}
	var jobID int64
	err := db.QueryRow(ctx, `SELECT kind, target, job_id FROM api_requests WHERE id = $1 AND player_id = $2`,
		id, player).Scan(&req.Kind, &req.Target, &jobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("requests: load %d: %w", id, err)
	}
	job, err := jobs.JobGet(ctx, jobID)
	if errors.Is(err, rivertype.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrExpired, id)
	}
	if err != nil {
		return nil, fmt.Errorf("requests: load job of %d: %w", id, err)
	}
	req.Status = Status(job.State)
	if out := job.Output(); req.Status == Succeeded && out != nil {
		req.Result = out
	}
	if n := len(job.Errors); n > 0 && req.Status != Succeeded {
		req.Error = job.Errors[n-1].Error
	}
	return req, nil
}

// Status maps River's job states onto the five statuses.
func Status(s rivertype.JobState) string {
	switch s {
	case rivertype.JobStateRunning:
		return Running
	case rivertype.JobStateCompleted:
		return Succeeded
	case rivertype.JobStateDiscarded:
		return Failed
	case rivertype.JobStateCancelled:
		return Cancelled
	default: // available, scheduled, pending, retryable (the last error says why)
		return Queued
	}
}
