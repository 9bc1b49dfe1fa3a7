package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// MaxResponse is how much of a receiver's answer is read and kept.
const MaxResponse = 1024

// UserAgent names billing's requests.
const UserAgent = "billing-webhooks/1"

// Delivery states.
const (
	statePending   = "pending"
	stateDelivered = "delivered"
	stateFailed    = "failed"
)

// delivery is one (event, endpoint) to send, as the worker reads it.
type delivery struct {
	id        int64
	state     string
	createdAt time.Time
	eventID   string
	eventType string
	body      []byte
	endpoint  *Endpoint
}

func loadDelivery(ctx context.Context, db dbtx.DB, id int64) (*delivery, error) {
	d := delivery{endpoint: &Endpoint{}}
	e := d.endpoint
	err := db.QueryRow(ctx, `SELECT d.id, d.state, d.created_at, v.id, v.type, v.payload::text,
		p.id, p.url, p.enabled, p.previous_secret_until, p.secret, coalesce(p.previous_secret, '')
		FROM event_deliveries d JOIN events v ON v.id = d.event_id JOIN event_endpoints p ON p.id = d.endpoint_id
		WHERE d.id = $1`, id).Scan(&d.id, &d.state, &d.createdAt, &d.eventID, &d.eventType, &d.body,
		&e.ID, &e.URL, &e.Enabled, &e.PreviousSecretUntil, &e.secret, &e.previous)
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// attempt is one request's outcome.
type attempt struct {
	at       time.Time
	status   int // 0: no answer
	latency  time.Duration
	err      string
	response string
}

func (a attempt) ok() bool { return a.status >= 200 && a.status < 300 }

func (a attempt) failure() error {
	if a.err != "" {
		return errors.New("events: " + a.err)
	}
	return fmt.Errorf("events: the endpoint answered %d", a.status)
}

// send POSTs d's body, signed, and reads at most MaxResponse bytes of the
// answer. It holds no connection of the database.
func (w *Worker) send(ctx context.Context, d *delivery) attempt {
	a := attempt{at: w.now()}
	req, err := w.request(ctx, d, a.at)
	if err != nil {
		a.err = err.Error()
		return a
	}
	start := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		a.latency, a.err = time.Since(start), err.Error()
		return a
	}
	defer resp.Body.Close()
	head, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxResponse))
	a.latency, a.status, a.response = time.Since(start), resp.StatusCode, text(head)
	if rerr != nil && a.ok() {
		a.err = "reading the answer: " + rerr.Error()
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		a.err = fmt.Sprintf("the endpoint answered %d (redirects are not followed; register the final URL)", resp.StatusCode)
	}
	return a
}

func (w *Worker) request(ctx context.Context, d *delivery, at time.Time) (*http.Request, error) {
	sig, err := Signature(d.eventID, at, d.body, d.endpoint.signingSecrets(at)...)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.endpoint.URL, bytes.NewReader(d.body))
	if err != nil {
		return nil, fmt.Errorf("events: request to endpoint %d: %w", d.endpoint.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("webhook-id", d.eventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	return req, nil
}

// text is what PostgreSQL can store of an answer's first bytes.
func text(b []byte) string {
	s := strings.ReplaceAll(string(b), "\x00", "")
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// record writes attempt a (number n) of d and the delivery's new state in
// one durable transaction; on d's last failed attempt it disables the
// endpoint when none of its deliveries succeeded since d was created.
func (w *Worker) record(ctx context.Context, d *delivery, a attempt, n int, last bool) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("events: record attempt of delivery %d: %w", d.id, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	state, next := statePending, a.at.Add(w.delay(d.id, n))
	switch {
	case a.ok():
		state = stateDelivered
	case last:
		state = stateFailed
	}
	if err := writeAttempt(ctx, tx, d.id, a, state, next); err != nil {
		return err
	}
	if state == stateFailed {
		if err := w.disableIfDead(ctx, tx, d); err != nil {
			return err
		}
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return fmt.Errorf("events: commit attempt of delivery %d: %w", d.id, err)
	}
	return nil
}

func writeAttempt(ctx context.Context, tx pgx.Tx, id int64, a attempt, state string, next time.Time) error {
	var status *int
	if a.status != 0 {
		status = &a.status
	}
	_, err := tx.Exec(ctx, `WITH att AS (
			INSERT INTO event_attempts (delivery_id, at, status_code, latency_ms, error, response)
			VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, '')))
		UPDATE event_deliveries SET attempts = attempts + 1, last_attempt_at = $2, state = $7,
			next_attempt_at = CASE WHEN $7 = 'pending' THEN $8::timestamptz END,
			delivered_at = CASE WHEN $7 = 'delivered' THEN $2::timestamptz END
		WHERE id = $1`, id, a.at, status, a.latency.Milliseconds(), a.err, a.response, state, next)
	if err != nil {
		return fmt.Errorf("events: record attempt of delivery %d: %w", id, err)
	}
	return nil
}

// disableIfDead disables d's endpoint when no delivery to it succeeded
// since d was created: the endpoint failed for the whole schedule.
func (w *Worker) disableIfDead(ctx context.Context, tx pgx.Tx, d *delivery) error {
	reason := fmt.Sprintf("every delivery failed for the whole retry schedule since %s (last: delivery %d of %s)",
		d.createdAt.UTC().Format(time.RFC3339), d.id, d.eventID)
	tag, err := tx.Exec(ctx, `UPDATE event_endpoints SET enabled = false, disabled_at = now(), disabled_reason = $2
		WHERE id = $1 AND enabled AND NOT EXISTS (
			SELECT 1 FROM event_deliveries WHERE endpoint_id = $1 AND delivered_at >= $3)`,
		d.endpoint.ID, reason, d.createdAt)
	if err != nil {
		return fmt.Errorf("events: disable endpoint %d: %w", d.endpoint.ID, err)
	}
	if tag.RowsAffected() > 0 {
		endpointsDisabled.Inc()
		w.logger.ErrorContext(ctx, "event endpoint disabled", "endpoint_id", d.endpoint.ID, "reason", reason)
	}
	return nil
}

// endDelivery marks a delivery to a disabled endpoint failed, with no
// attempt: a resend makes a new one.
func endDelivery(ctx context.Context, pool *pgxpool.Pool, id int64) error {
	err := durable.Do(ctx, pool, func(conn *pgxpool.Conn) error {
		_, err := conn.Exec(ctx, `UPDATE event_deliveries SET state = 'failed', next_attempt_at = NULL
			WHERE id = $1 AND state = 'pending'`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("events: end delivery %d: %w", id, err)
	}
	return nil
}
