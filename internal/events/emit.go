package events

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// inserter is an insert-only River client without a pool: it only ever
// writes through the transaction it is given. Effects are emitted from
// workers, API handlers and operator commands alike; one such client
// spares each of them a River client of their own.
var inserter = sync.OnceValues(func() (*river.Client[pgx.Tx], error) {
	return river.NewClient(riverpgxv5.New(nil), &river.Config{})
})

// Emitted is what EmitTx did.
type Emitted struct {
	ID       string
	Sequence int64
	// Replayed: the event existed (an earlier run of the same effect wrote
	// it); nothing was written.
	Replayed bool
	// Deliveries is how many delivery jobs were enqueued.
	Deliveries int
}

// emitSQL writes the event unless its id exists, bumping the player's
// sequence only then (a replay burns no sequence; a concurrent twin can, so
// sequences may have gaps). A concurrent twin's insert waits on the primary
// key and then does nothing. The body is built here, once, so every
// delivery of the id sends the same bytes.
const emitSQL = `WITH fresh AS (
	SELECT NOT EXISTS (SELECT 1 FROM events WHERE id = $1) AS yes
), seq AS (
	INSERT INTO event_sequences AS s (player_id, last) SELECT $3, 1 FROM fresh WHERE yes
	ON CONFLICT (player_id) DO UPDATE SET last = s.last + 1
	RETURNING last
)
INSERT INTO events (id, type, player_id, sequence, payload, created_at)
SELECT $1, $2, $3, seq.last, jsonb_build_object('id', $1::text, 'type', $2::text, 'api_version', $5::text,
	'created_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
	'player_id', $3::bigint, 'sequence', seq.last, 'data', $4::jsonb), now()
FROM seq
ON CONFLICT (id) DO NOTHING
RETURNING sequence`

// EmitTx writes ev in tx, the transaction of the effect it reports, and
// one delivery job per enabled endpoint that wants its type. It is
// idempotent on the event's id: a second call for the same effect (a
// retry, a replay, a concurrent twin) writes nothing and answers Replayed.
func EmitTx(ctx context.Context, tx pgx.Tx, ev Event) (Emitted, error) {
	if err := CheckTypes([]string{ev.Type}); err != nil {
		return Emitted{}, err
	}
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return Emitted{}, fmt.Errorf("events: %s data: %w", ev.Type, err)
	}
	out := Emitted{ID: ev.ID()}
	err = tx.QueryRow(ctx, emitSQL, out.ID, ev.Type, ev.PlayerID, data, APIVersion).Scan(&out.Sequence)
	if err == pgx.ErrNoRows {
		out.Replayed = true
		return out, nil
	}
	if err != nil {
		return Emitted{}, fmt.Errorf("events: write %s %s: %w", ev.Type, out.ID, err)
	}
	n, err := enqueueTx(ctx, tx, out.ID, ev.Type, 0)
	out.Deliveries = n
	return out, err
}

// EmitManyTx is EmitTx for each of evs, in order; callers that lock
// several players pass them in player order.
func EmitManyTx(ctx context.Context, tx pgx.Tx, evs []Event) error {
	for _, ev := range evs {
		if _, err := EmitTx(ctx, tx, ev); err != nil {
			return err
		}
	}
	return nil
}

// enqueueTx creates a delivery of event eventID (of type typ) to every
// enabled endpoint that wants it, or to endpoint alone when it is not 0,
// and inserts their delivery jobs.
func enqueueTx(ctx context.Context, tx pgx.Tx, eventID, typ string, endpoint int64) (int, error) {
	rows, err := tx.Query(ctx, `INSERT INTO event_deliveries (event_id, endpoint_id)
		SELECT $1, id FROM event_endpoints
		WHERE CASE WHEN $3::bigint <> 0 THEN id = $3
			ELSE enabled AND (cardinality(types) = 0 OR $2::text = ANY (types)) END
		ORDER BY id
		RETURNING id`, eventID, typ, endpoint)
	if err != nil {
		return 0, fmt.Errorf("events: deliveries of %s: %w", eventID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("events: deliveries of %s: %w", eventID, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: DeliverArgs{DeliveryID: id}}
	}
	client, err := inserter()
	if err != nil {
		return 0, fmt.Errorf("events: river client: %w", err)
	}
	if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
		return 0, fmt.Errorf("events: insert delivery jobs of %s: %w", eventID, err)
	}
	return len(ids), nil
}
