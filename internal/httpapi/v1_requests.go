package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Request statuses of GET /v1/requests/{id}.
const (
	RequestQueued    = "queued"
	RequestRunning   = "running"
	RequestSucceeded = "succeeded"
	RequestFailed    = "failed"
	RequestCancelled = "cancelled"
)

var errNoRiver = errors.New("httpapi: no River client configured")

func (a *api) needRiver() error {
	if a.river == nil {
		return errNoRiver
	}
	return nil
}

// accepted records the api_requests row of a job inserted in the same tx
// and answers 202 with its id.
func (a *api) accepted(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64, kind, target string, jobID, playgroundID int64) error {
	var id int64
	err := tx.QueryRow(r.Context(), `
		INSERT INTO api_requests (player_id, kind, target, job_id, created_at) VALUES ($1, $2, $3, $4, $5)
		RETURNING id`, player, kind, target, jobID, a.now()).Scan(&id)
	if err != nil {
		return fmt.Errorf("httpapi: record request: %w", err)
	}
	body := struct {
		RequestID    string `json:"request_id"`
		PlaygroundID string `json:"playground_id,omitempty"`
	}{RequestID: strconv.FormatInt(id, 10)}
	if playgroundID != 0 {
		body.PlaygroundID = strconv.FormatInt(playgroundID, 10)
	}
	w.Header().Set("Location", "/v1/requests/"+body.RequestID)
	return writeJSON(w, http.StatusAccepted, body)
}

// requestView is GET /v1/requests/{id}.
type requestView struct {
	ID     int64           `json:"id,string"`
	Kind   string          `json:"kind"`
	Target string          `json:"target"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error,omitempty"`
}

// requestStatus maps River's job states onto the API's five statuses.
func requestStatus(s rivertype.JobState) string {
	switch s {
	case rivertype.JobStateRunning:
		return RequestRunning
	case rivertype.JobStateCompleted:
		return RequestSucceeded
	case rivertype.JobStateDiscarded:
		return RequestFailed
	case rivertype.JobStateCancelled:
		return RequestCancelled
	default: // available, scheduled, pending, retryable (the last error says why)
		return RequestQueued
	}
}

func (a *api) getRequest(w http.ResponseWriter, r *http.Request, player int64) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	v := requestView{ID: id}
	var jobID int64
	err = a.pool.QueryRow(r.Context(), `SELECT kind, target, job_id FROM api_requests WHERE id = $1 AND player_id = $2`,
		id, player).Scan(&v.Kind, &v.Target, &jobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return errNotFound
	}
	if err != nil {
		return fmt.Errorf("httpapi: load request: %w", err)
	}
	if err := a.needRiver(); err != nil {
		return err
	}
	job, err := a.river.JobGet(r.Context(), jobID)
	if errors.Is(err, rivertype.ErrNotFound) {
		// River deletes finished jobs after its retention period (24 h for
		// completed ones); the request is then no longer known.
		return &apiError{status: http.StatusNotFound, code: CodeNotFound, detail: "this request is too old to be reported"}
	}
	if err != nil {
		return fmt.Errorf("httpapi: load job: %w", err)
	}
	v.Status = requestStatus(job.State)
	if v.Status == RequestSucceeded {
		v.Result = job.Output()
	}
	if n := len(job.Errors); n > 0 && v.Status != RequestSucceeded {
		v.Error = job.Errors[n-1].Error
	}
	if v.Result == nil {
		v.Result = json.RawMessage("null")
	}
	return writeJSON(w, http.StatusOK, v)
}
