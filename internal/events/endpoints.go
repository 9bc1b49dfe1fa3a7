package events

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// Errors of endpoint management. Compare with errors.Is.
var (
	ErrBadURL           = errors.New("events: endpoint URL must be an absolute http or https URL with a host")
	ErrEndpointNotFound = errors.New("events: endpoint not found")
	ErrEventNotFound    = errors.New("events: event not found")
)

// Endpoint is where events are sent.
type Endpoint struct {
	ID                  int64      `json:"id"`
	URL                 string     `json:"url"`
	Types               []string   `json:"types"` // empty: every type
	Enabled             bool       `json:"enabled"`
	DisabledAt          *time.Time `json:"disabled_at,omitempty"`
	DisabledReason      string     `json:"disabled_reason,omitempty"`
	PreviousSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
	CreatedAt           time.Time  `json:"created_at"`
	// secrets sign: the current one, then the previous one while its
	// rotation's grace lasts. Never printed but by Add and RotateSecret.
	secret, previous string
}

const endpointColumns = `id, url, types, enabled, disabled_at, coalesce(disabled_reason, ''), previous_secret_until,
	created_at, secret, coalesce(previous_secret, '')`

func scanEndpoint(row pgx.Row) (*Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.ID, &e.URL, &e.Types, &e.Enabled, &e.DisabledAt, &e.DisabledReason, &e.PreviousSecretUntil,
		&e.CreatedAt, &e.secret, &e.previous)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// NewSecret returns a fresh signing secret: "whsec_" and 24 random bytes in
// base64, as Standard Webhooks spells them.
func NewSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// CheckURL accepts only absolute http and https URLs with a host.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || len(raw) > 2048 {
		return fmt.Errorf("%w: %q", ErrBadURL, raw)
	}
	return nil
}

// Added is what AddEndpoint did. Secret is set only when it created the
// endpoint: it is shown once.
type Added struct {
	Endpoint *Endpoint
	Created  bool
	Secret   string
}

// AddEndpoint adds an endpoint for url wanting types (none: every type).
// It is idempotent on url: adding a known URL answers the endpoint as it
// is, unchanged, without its secret.
func AddEndpoint(ctx context.Context, pool *pgxpool.Pool, rawURL string, types []string) (Added, error) {
	if err := CheckURL(rawURL); err != nil {
		return Added{}, err
	}
	if err := CheckTypes(types); err != nil {
		return Added{}, err
	}
	types = slices.Compact(slices.Sorted(slices.Values(types)))
	if types == nil {
		types = []string{}
	}
	secret := NewSecret()
	var e *Endpoint
	err := durable.Do(ctx, pool, func(conn *pgxpool.Conn) error {
		var err error
		e, err = scanEndpoint(conn.QueryRow(ctx, `INSERT INTO event_endpoints (url, secret, types) VALUES ($1, $2, $3)
			ON CONFLICT (url) DO NOTHING RETURNING `+endpointColumns, rawURL, secret, types))
		return err
	})
	if err == nil {
		return Added{Endpoint: e, Created: true, Secret: secret}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Added{}, fmt.Errorf("events: add endpoint: %w", err)
	}
	e, err = scanEndpoint(pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM event_endpoints WHERE url = $1`, rawURL))
	if err != nil {
		return Added{}, fmt.Errorf("events: read endpoint %q: %w", rawURL, err)
	}
	return Added{Endpoint: e}, nil
}

// Endpoints lists every endpoint by id.
func Endpoints(ctx context.Context, db dbtx.DB) ([]*Endpoint, error) {
	rows, err := db.Query(ctx, `SELECT `+endpointColumns+` FROM event_endpoints ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("events: list endpoints: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Endpoint, error) { return scanEndpoint(r) })
}

// SetEnabled enables or disables endpoint id; reason says why it was
// disabled. Disabling stops its pending deliveries at their next attempt;
// enabling sends new events again (use resend for the ones missed).
func SetEnabled(ctx context.Context, pool *pgxpool.Pool, id int64, enabled bool, reason string) (*Endpoint, error) {
	var e *Endpoint
	err := durable.Do(ctx, pool, func(conn *pgxpool.Conn) error {
		var err error
		e, err = scanEndpoint(conn.QueryRow(ctx, `UPDATE event_endpoints SET enabled = $2,
			disabled_at = CASE WHEN $2 THEN NULL WHEN enabled THEN now() ELSE disabled_at END,
			disabled_reason = CASE WHEN $2 THEN NULL ELSE $3 END
			WHERE id = $1 RETURNING `+endpointColumns, id, enabled, reason))
		return err
	})
	return e, endpointErr(err, id)
}

// RotateSecret gives endpoint id a new secret and keeps signing with the
// old one too until grace has passed, so a receiver can switch without
// refusing a delivery. It returns the new secret, shown once.
func RotateSecret(ctx context.Context, pool *pgxpool.Pool, id int64, grace time.Duration) (*Endpoint, string, error) {
	if grace < 0 {
		return nil, "", fmt.Errorf("events: rotate-secret: negative grace %s", grace)
	}
	secret := NewSecret()
	var e *Endpoint
	err := durable.Do(ctx, pool, func(conn *pgxpool.Conn) error {
		var err error
		e, err = scanEndpoint(conn.QueryRow(ctx, `UPDATE event_endpoints SET previous_secret = secret,
			previous_secret_until = now() + make_interval(secs => $3), secret = $2
			WHERE id = $1 RETURNING `+endpointColumns, id, secret, grace.Seconds()))
		return err
	})
	if err != nil {
		return nil, "", endpointErr(err, id)
	}
	return e, secret, nil
}

func endpointErr(err error, id int64) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %d", ErrEndpointNotFound, id)
	}
	return fmt.Errorf("events: endpoint %d: %w", id, err)
}

// Secrets are the secrets url's endpoint signs with now: its secret, then
// its previous one while a rotation's grace lasts. A receiver run by the
// same operator (billing dev's own) verifies with them.
func Secrets(ctx context.Context, db dbtx.DB, url string) ([]string, error) {
	var secret string
	var previous *string
	err := db.QueryRow(ctx, `SELECT secret, CASE WHEN previous_secret_until > now() THEN previous_secret END
		FROM event_endpoints WHERE url = $1`, url).Scan(&secret, &previous)
	if err != nil {
		return nil, fmt.Errorf("events: secrets of %q: %w", url, err)
	}
	if previous != nil {
		return []string{secret, *previous}, nil
	}
	return []string{secret}, nil
}
