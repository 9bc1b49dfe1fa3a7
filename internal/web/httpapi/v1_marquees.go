package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/domain/playground"
)

func (a *api) createMarquee(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error {
	var body struct {
		Name string `json:"name"`
		Plan string `json:"plan"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	m, err := enforcer.CreateMarquee(r.Context(), tx, a.plans, enforcer.CreateParams{
		PlayerID: player, Name: body.Name, Plan: body.Plan,
	})
	if err != nil {
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/v1/marquees/%d", m.ID))
	return writeJSON(w, http.StatusCreated, viewMarquee(m, a.now()))
}

func (a *api) listMarquees(w http.ResponseWriter, r *http.Request, player int64) error {
	ms, err := enforcer.ListMarquees(r.Context(), a.pool, player)
	if err != nil {
		return err
	}
	now := a.now()
	out := struct {
		Data []marqueeView `json:"data"`
	}{Data: make([]marqueeView, 0, len(ms))}
	for _, m := range ms {
		out.Data = append(out.Data, viewMarquee(m, now))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *api) getMarquee(w http.ResponseWriter, r *http.Request, player int64) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	m, err := enforcer.GetMarquee(r.Context(), a.pool, player, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, viewMarquee(m, a.now()))
}

// fundMarquee enqueues today's fund_day job now rather than at the next
// sweep. The job is River-unique per (Marquee, day): a second call answers
// a request on the same job.
func (a *api) fundMarquee(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error {
	if err := decode(r, &struct{}{}); err != nil {
		return err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if _, err := enforcer.GetMarquee(r.Context(), tx, player, id); err != nil {
		return err
	}
	if err := a.needRiver(); err != nil {
		return err
	}
	res, err := enforcer.EnqueueFundDayTx(r.Context(), tx, a.river, id, a.now(), a.tz)
	if err != nil {
		return err
	}
	return a.accepted(w, r, tx, player, "fund", fmt.Sprintf("marquee:%d", id), res.Job.ID, 0)
}

func (a *api) createPlayground(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error {
	var body struct {
		Name string `json:"name"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	marqueeID, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := a.needRiver(); err != nil {
		return err
	}
	enq, err := playground.CreateTx(r.Context(), tx, a.river, playground.CreateParams{
		PlayerID: player, MarqueeID: marqueeID, Name: body.Name,
	}, a.now())
	if err != nil {
		return err
	}
	return a.accepted(w, r, tx, player, "playground_create", fmt.Sprintf("playground:%d", enq.Playground.ID), enq.Job.ID, enq.Playground.ID)
}

func (a *api) restartPlayground(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error {
	return a.operatePlayground(w, r, tx, player, "playground_restart", playground.RestartTx)
}

func (a *api) syncPlayground(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error {
	return a.operatePlayground(w, r, tx, player, "playground_sync", playground.SyncTx)
}

type playgroundOp func(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], playerID, id int64, now time.Time) (*playground.Enqueued, error)

func (a *api) operatePlayground(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64, kind string, op playgroundOp) error {
	if err := decode(r, &struct{}{}); err != nil {
		return err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := a.needRiver(); err != nil {
		return err
	}
	enq, err := op(r.Context(), tx, a.river, player, id, a.now())
	if err != nil {
		return err
	}
	return a.accepted(w, r, tx, player, kind, fmt.Sprintf("playground:%d", id), enq.Job.ID, id)
}

func (a *api) getPlayground(w http.ResponseWriter, r *http.Request, player int64) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	pg, err := playground.Get(r.Context(), a.pool, player, id)
	if err != nil {
		return err
	}
	// The resource is the shape a playground job records as its result.
	return writeJSON(w, http.StatusOK, playground.OutputOf(pg))
}

// marqueeView is the API's Marquee.
type marqueeView struct {
	ID          int64      `json:"id,string"`
	Name        string     `json:"name"`
	Plan        string     `json:"plan"`
	DailyPrice  int64      `json:"daily_price"` // Sparks per service day
	Status      string     `json:"status"`
	Funded      bool       `json:"funded"`
	PaidThrough *time.Time `json:"paid_through"` // nil: never funded
}

// viewMarquee is m as of now.
func viewMarquee(m *enforcer.Marquee, now time.Time) marqueeView {
	v := m.View(now)
	return marqueeView{ID: v.ID, Name: v.Name, Plan: v.Plan, DailyPrice: v.DailyPrice, Status: v.Status,
		Funded: v.Funded, PaidThrough: v.PaidThrough}
}
