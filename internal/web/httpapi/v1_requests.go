package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/web/requests"
)

var errNoRiver = errors.New("httpapi: no River client configured")

func (a *api) needRiver() error {
	if a.river == nil {
		return errNoRiver
	}
	return nil
}

// accepted records the request of a job inserted in the same tx and
// answers 202 with its id.
func (a *api) accepted(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64, kind, target string, jobID, playgroundID int64) error {
	id, err := requests.RecordTx(r.Context(), tx, player, kind, target, jobID, a.now())
	if err != nil {
		return err
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

func (a *api) getRequest(w http.ResponseWriter, r *http.Request, player int64) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := a.needRiver(); err != nil {
		return err
	}
	req, err := requests.Get(r.Context(), a.pool, a.river, player, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, requestView{ID: req.ID, Kind: req.Kind, Target: req.Target, Status: req.Status,
		Result: req.Result, Error: req.Error})
}
