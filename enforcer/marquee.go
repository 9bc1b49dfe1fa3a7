package enforcer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fibe-dev/billing/internal/domain/names"
	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/errcode"
)

// DB is a pool, a connection or a transaction (the one DB interface).
type DB = dbtx.DB

// Desired states and statuses of a Marquee.
const (
	StateRunning = "running"
	StateStopped = "stopped"

	StatusFunded   = "funded"
	StatusUnfunded = "unfunded"
	StatusStopped  = "stopped"
)

// MaxNameLength bounds a Marquee name, in characters.
const MaxNameLength = 100

// Errors, each a client can cause with its answer (package errcode). A
// Marquee that is not funded is 402 Payment Required.
var (
	ErrNotFound  = errcode.New("enforcer: marquee not found", errcode.NotFound)
	ErrNotFunded = errcode.New("enforcer: marquee not funded", errcode.Answer{Status: http.StatusPaymentRequired,
		Code: "marquee_not_funded", Detail: "the Marquee is not funded: add Sparks and fund it first"})
	ErrUnknownPlan = errcode.New("enforcer: unknown plan", errcode.Answer{Status: http.StatusBadRequest,
		Code: "unknown_plan", Detail: "no such plan"})
	ErrInvalidName = errcode.New("enforcer: name must be 1 to 100 printable characters", errcode.Answer{
		Status: http.StatusBadRequest, Code: "invalid_name",
		Detail: fmt.Sprintf("a Marquee's name must be 1 to %d printable characters", MaxNameLength)})
	ErrUnknownPlayer = errors.New("enforcer: unknown player")
)

// Marquee is a player's Docker host. Funded depends on the clock, so
// loaders leave it false: m.View(now) is the Marquee as of now.
type Marquee struct {
	ID           int64
	PlayerID     int64
	Name         string
	Plan         string
	DailyPrice   int64 // Sparks per service day, copied from the plan
	DesiredState string
	Status       string
	Funded       bool
	PaidThrough  *time.Time // nil: never funded
	LastError    string
	CreatedAt    time.Time
}

// Funded is the gate: whether m may run at now. paid_through is the end
// (exclusive) of the last funded service day.
func Funded(m *Marquee, now time.Time) bool {
	return m.PaidThrough != nil && m.PaidThrough.After(now)
}

// View returns a copy of m as the API shows it at now: Funded set, and a
// status that agrees with it (a Marquee whose day has run out reads
// unfunded even before the next sweep records that).
func (m *Marquee) View(now time.Time) *Marquee {
	v := *m
	v.Funded = Funded(m, now)
	switch {
	case m.DesiredState == StateStopped:
		v.Status = StatusStopped
	case v.Funded:
		v.Status = StatusFunded
	default:
		v.Status = StatusUnfunded
	}
	return &v
}

// CreateParams describe a new Marquee.
type CreateParams struct {
	PlayerID int64
	Name     string
	Plan     string
}

const marqueeColumns = `id, player_id, name, plan, daily_price, desired_state, status, paid_through,
	coalesce(last_funding_error, ''), created_at`

func scanMarquee(row pgx.Row) (*Marquee, error) {
	var m Marquee
	err := row.Scan(&m.ID, &m.PlayerID, &m.Name, &m.Plan, &m.DailyPrice, &m.DesiredState, &m.Status,
		&m.PaidThrough, &m.LastError, &m.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("enforcer: scan marquee: %w", err)
	}
	return &m, nil
}

// CreateMarquee creates a running, not yet funded Marquee on one of plans.
// Its daily price is the plan's at creation; later plan changes do not
// reprice it.
func CreateMarquee(ctx context.Context, db DB, plans map[string]Plan, p CreateParams) (*Marquee, error) {
	plan, ok := plans[p.Plan]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPlan, p.Plan)
	}
	name := strings.TrimSpace(p.Name)
	if !validName(name) {
		return nil, ErrInvalidName
	}
	m, err := scanMarquee(db.QueryRow(ctx, `INSERT INTO marquees (player_id, name, plan, daily_price)
		VALUES ($1, $2, $3, $4) RETURNING `+marqueeColumns, p.PlayerID, name, p.Plan, plan.DailySparks))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" { // foreign_key_violation
		return nil, fmt.Errorf("%w: %d", ErrUnknownPlayer, p.PlayerID)
	}
	return m, err
}

func validName(name string) bool { return names.Valid(name, MaxNameLength) }

// GetMarquee loads one of playerID's Marquees. Another player's Marquee is
// ErrNotFound, exactly as a missing one.
func GetMarquee(ctx context.Context, db DB, playerID, marqueeID int64) (*Marquee, error) {
	return scanMarquee(db.QueryRow(ctx, `SELECT `+marqueeColumns+` FROM marquees
		WHERE id = $1 AND player_id = $2`, marqueeID, playerID))
}

// ListMarquees returns playerID's Marquees, oldest first.
func ListMarquees(ctx context.Context, db DB, playerID int64) ([]*Marquee, error) {
	rows, err := db.Query(ctx, `SELECT `+marqueeColumns+` FROM marquees WHERE player_id = $1 ORDER BY id`, playerID)
	if err != nil {
		return nil, fmt.Errorf("enforcer: list marquees: %w", err)
	}
	defer rows.Close()
	var out []*Marquee
	for rows.Next() {
		m, err := scanMarquee(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("enforcer: list marquees: %w", err)
	}
	return out, nil
}

// RequireFunded loads one of playerID's Marquees and returns ErrNotFunded
// (the API's 402) unless it is funded at now; ErrNotFound as GetMarquee.
func RequireFunded(ctx context.Context, db DB, playerID, marqueeID int64, now time.Time) (*Marquee, error) {
	m, err := GetMarquee(ctx, db, playerID, marqueeID)
	if err != nil {
		return nil, err
	}
	if !Funded(m, now) {
		return m, ErrNotFunded
	}
	return m, nil
}
