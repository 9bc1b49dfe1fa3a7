// Package playground records playgrounds, the workloads a player runs on a
// Marquee, and their create, restart and sync River jobs.
//
// The host agent that actually runs containers on a Marquee is outside this
// system. This package keeps the record the agent works from: a playground
// row moves from provisioning to running when its create job is worked, and
// restart and sync jobs stamp restarted_at and synced_at (with counters).
// Each job updates the row and completes itself in one transaction, so a
// River retry after a crash never records an operation twice.
//
// Every operation is behind the funded gate (enforcer.RequireFunded): on a
// Marquee that is not funded it returns enforcer.ErrNotFunded (the API's
// 402) and enqueues nothing. Workers check the gate again when they run: a
// Marquee whose funding lapsed in between has its job cancelled.
package playground

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/domain/names"
	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/errcode"
)

// Statuses.
const (
	StatusProvisioning = "provisioning"
	StatusRunning      = "running"
)

// DefaultName names a playground created without one.
const DefaultName = "playground"

// MaxNameLength bounds a playground's name, in characters.
const MaxNameLength = 200

// Errors. An operation on a Marquee that is not funded returns
// enforcer.ErrNotFunded; another player's Marquee, enforcer.ErrNotFound.
var (
	// ErrNotFound is a missing playground or another player's.
	ErrNotFound    = errcode.New("playground: not found", errcode.NotFound)
	ErrInvalidName = errcode.New("playground: name must be 1 to 200 printable characters", errcode.Answer{
		Status: http.StatusBadRequest, Code: "invalid_name", Detail: fmt.Sprintf(
			"a playground's name must be at most %d printable characters (without one it is %q)", MaxNameLength, DefaultName)})
)

// DB is a pool, a connection or a transaction (the one DB interface).
type DB = dbtx.DB

// Playground is a workload on a Marquee.
type Playground struct {
	ID           int64
	PlayerID     int64
	MarqueeID    int64
	Name         string
	Status       string
	CreatedAt    time.Time
	RunningAt    *time.Time
	RestartedAt  *time.Time
	RestartCount int
	SyncedAt     *time.Time
	SyncCount    int
}

const columns = `id, player_id, marquee_id, name, status, created_at, running_at, restarted_at, restart_count, synced_at, sync_count`

func scan(row pgx.Row) (*Playground, error) {
	var p Playground
	err := row.Scan(&p.ID, &p.PlayerID, &p.MarqueeID, &p.Name, &p.Status, &p.CreatedAt, &p.RunningAt,
		&p.RestartedAt, &p.RestartCount, &p.SyncedAt, &p.SyncCount)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("playground: %w", err)
	}
	return &p, nil
}

// Get returns one of playerID's playgrounds; another player's is ErrNotFound.
func Get(ctx context.Context, db DB, playerID, id int64) (*Playground, error) {
	return scan(db.QueryRow(ctx, `SELECT `+columns+` FROM playgrounds WHERE id = $1 AND player_id = $2`, id, playerID))
}

// Enqueued is a playground and the job an operation queued for it.
type Enqueued struct {
	Playground *Playground
	Job        *rivertype.JobRow
}

// CreateParams describe a new playground.
type CreateParams struct {
	PlayerID  int64
	MarqueeID int64
	Name      string // empty: DefaultName
}

// CreateTx records a provisioning playground on a funded Marquee and
// enqueues its create job, both in tx.
func CreateTx(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], p CreateParams, now time.Time) (*Enqueued, error) {
	name := strings.TrimSpace(p.Name)
	if name == "" {
		name = DefaultName
	}
	if !names.Valid(name, MaxNameLength) {
		return nil, ErrInvalidName
	}
	if _, err := enforcer.RequireFunded(ctx, tx, p.PlayerID, p.MarqueeID, now); err != nil {
		return nil, err
	}
	pg, err := scan(tx.QueryRow(ctx, `
		INSERT INTO playgrounds (player_id, marquee_id, name, created_at) VALUES ($1, $2, $3, $4)
		RETURNING `+columns, p.PlayerID, p.MarqueeID, name, now))
	if err != nil {
		return nil, err
	}
	return enqueue(ctx, tx, client, pg, CreateArgs{PlaygroundID: pg.ID})
}

// RestartTx enqueues a restart of one of playerID's playgrounds.
func RestartTx(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], playerID, id int64, now time.Time) (*Enqueued, error) {
	return operate(ctx, tx, client, playerID, id, now, func(id int64) river.JobArgs { return RestartArgs{PlaygroundID: id} })
}

// SyncTx enqueues a sync of one of playerID's playgrounds.
func SyncTx(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], playerID, id int64, now time.Time) (*Enqueued, error) {
	return operate(ctx, tx, client, playerID, id, now, func(id int64) river.JobArgs { return SyncArgs{PlaygroundID: id} })
}

func operate(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], playerID, id int64, now time.Time,
	args func(int64) river.JobArgs) (*Enqueued, error) {
	pg, err := Get(ctx, tx, playerID, id)
	if err != nil {
		return nil, err
	}
	if _, err := enforcer.RequireFunded(ctx, tx, playerID, pg.MarqueeID, now); err != nil {
		return nil, err
	}
	return enqueue(ctx, tx, client, pg, args(pg.ID))
}

func enqueue(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], pg *Playground, args river.JobArgs) (*Enqueued, error) {
	res, err := client.InsertTx(ctx, tx, args, nil)
	if err != nil {
		return nil, fmt.Errorf("playground: enqueue %s: %w", args.Kind(), err)
	}
	return &Enqueued{Playground: pg, Job: res.Job}, nil
}
