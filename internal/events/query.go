package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// Stored is an event as written.
type Stored struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	PlayerID  int64           `json:"player_id"`
	Sequence  int64           `json:"sequence"`
	CreatedAt time.Time       `json:"created_at"`
	Body      json.RawMessage `json:"body"` // exactly what is sent
}

// Filter selects events to list.
type Filter struct {
	PlayerID int64  // 0: every player
	Type     string // "": every type
	Limit    int    // 0: 100
}

// List lists events, newest first.
func List(ctx context.Context, db dbtx.DB, f Filter) ([]Stored, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := db.Query(ctx, `SELECT id, type, player_id, sequence, created_at, payload::text FROM events
		WHERE ($1 = 0 OR player_id = $1) AND ($2 = '' OR type = $2)
		ORDER BY created_at DESC, id LIMIT $3`, f.PlayerID, f.Type, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("events: list: %w", err)
	}
	return pgx.CollectRows(rows, scanStored)
}

func scanStored(r pgx.CollectableRow) (Stored, error) {
	var s Stored
	var body string
	err := r.Scan(&s.ID, &s.Type, &s.PlayerID, &s.Sequence, &s.CreatedAt, &body)
	s.Body = json.RawMessage(body)
	return s, err
}

// Delivery is one delivery of an event to an endpoint, with its attempts.
type Delivery struct {
	ID            int64      `json:"id"`
	EndpointID    int64      `json:"endpoint_id"`
	URL           string     `json:"url"`
	State         string     `json:"state"`
	Attempts      []Attempt  `json:"attempts"`
	CreatedAt     time.Time  `json:"created_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
}

// Attempt is one recorded request.
type Attempt struct {
	At         time.Time `json:"at"`
	StatusCode int       `json:"status_code,omitempty"`
	LatencyMS  int64     `json:"latency_ms"`
	Error      string    `json:"error,omitempty"`
	Response   string    `json:"response,omitempty"`
}

// Shown is an event with its deliveries.
type Shown struct {
	Stored
	Deliveries []Delivery `json:"deliveries"`
}

// Show reads event id with every delivery and attempt.
func Show(ctx context.Context, db dbtx.DB, id string) (*Shown, error) {
	rows, err := db.Query(ctx, `SELECT id, type, player_id, sequence, created_at, payload::text FROM events WHERE id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("events: show %s: %w", id, err)
	}
	s, err := pgx.CollectExactlyOneRow(rows, scanStored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrEventNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("events: show %s: %w", id, err)
	}
	out := &Shown{Stored: s}
	out.Deliveries, err = deliveriesOf(ctx, db, id)
	return out, err
}

func deliveriesOf(ctx context.Context, db dbtx.DB, eventID string) ([]Delivery, error) {
	rows, err := db.Query(ctx, `SELECT d.id, d.endpoint_id, p.url, d.state, d.created_at, d.next_attempt_at, d.delivered_at,
		coalesce((SELECT json_agg(json_build_object('at', a.at, 'status_code', coalesce(a.status_code, 0),
			'latency_ms', a.latency_ms, 'error', coalesce(a.error, ''), 'response', coalesce(a.response, '')) ORDER BY a.id)
			FROM event_attempts a WHERE a.delivery_id = d.id), '[]')
		FROM event_deliveries d JOIN event_endpoints p ON p.id = d.endpoint_id
		WHERE d.event_id = $1 ORDER BY d.id`, eventID)
	if err != nil {
		return nil, fmt.Errorf("events: deliveries of %s: %w", eventID, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		err := r.Scan(&d.ID, &d.EndpointID, &d.URL, &d.State, &d.CreatedAt, &d.NextAttemptAt, &d.DeliveredAt, &d.Attempts)
		return d, err
	})
}

// Resend makes a new delivery of event id, under the same id and body:
// to endpoint (when not 0, enabled or not), else to every enabled
// endpoint that wants its type. It returns how many it made.
func Resend(ctx context.Context, pool *pgxpool.Pool, id string, endpoint int64) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("events: resend %s: %w", id, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var typ string
	if err := tx.QueryRow(ctx, `SELECT type FROM events WHERE id = $1`, id).Scan(&typ); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("%w: %q", ErrEventNotFound, id)
		}
		return 0, fmt.Errorf("events: resend %s: %w", id, err)
	}
	if endpoint != 0 {
		if err := tx.QueryRow(ctx, `SELECT id FROM event_endpoints WHERE id = $1`, endpoint).Scan(&endpoint); err != nil {
			return 0, endpointErr(err, endpoint)
		}
	}
	n, err := enqueueTx(ctx, tx, id, typ, endpoint)
	if err != nil {
		return 0, err
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return 0, fmt.Errorf("events: commit resend of %s: %w", id, err)
	}
	return n, nil
}
