package events

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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

// emitSQL writes the events that do not exist yet, numbers them in each
// player's sequence (bumping it once per player: a replay burns no
// sequence; a concurrent twin can, so sequences may have gaps), and
// creates their deliveries to every enabled endpoint that wants their
// type: one statement, one round trip, however many events. A concurrent
// twin's insert waits on the primary key and then does nothing. The body
// is built here, once, so every delivery of an id sends the same bytes.
// created_at is read after the player's sequence row is locked (held to
// commit), not at the transaction's start: a transaction that began first
// but numbered second is stamped later, so created_at grows with sequence.
const emitSQL = `WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::jsonb[]) WITH ORDINALITY AS i(id, type, player_id, data, ord)
), fresh AS (
	SELECT * FROM input i WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = i.id)
), seq AS (
	INSERT INTO event_sequences AS s (player_id, last)
	SELECT player_id, count(*) FROM fresh GROUP BY player_id ORDER BY player_id
	ON CONFLICT (player_id) DO UPDATE SET last = s.last + excluded.last
	RETURNING player_id, last
), numbered AS (
	SELECT f.*, seq.last - count(*) OVER w + row_number() OVER (w ORDER BY f.ord) AS sequence, clock_timestamp() AS at
	FROM fresh f JOIN seq USING (player_id)
	WINDOW w AS (PARTITION BY f.player_id)
), ins AS (
	INSERT INTO events (id, type, player_id, sequence, payload, created_at)
	SELECT id, type, player_id, sequence, jsonb_build_object('id', id, 'type', type, 'api_version', $5::text,
		'created_at', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
		'player_id', player_id, 'sequence', sequence, 'data', data), at
	FROM numbered ORDER BY ord
	ON CONFLICT (id) DO NOTHING
	RETURNING id, type, sequence
), del AS (
	INSERT INTO event_deliveries (event_id, endpoint_id)
	SELECT ins.id, p.id FROM ins JOIN event_endpoints p
		ON p.enabled AND (cardinality(p.types) = 0 OR ins.type = ANY (p.types))
	ORDER BY ins.id, p.id
	RETURNING id, event_id
)
SELECT ins.id, ins.sequence, coalesce(array_agg(del.id) FILTER (WHERE del.id IS NOT NULL), '{}')
FROM ins LEFT JOIN del ON del.event_id = ins.id
GROUP BY ins.id, ins.sequence`

// EmitTx writes ev in tx, the transaction of the effect it reports, and
// one delivery job per enabled endpoint that wants its type. It is
// idempotent on the event's id: a second call for the same effect (a
// retry, a replay, a concurrent twin) writes nothing and answers Replayed.
func EmitTx(ctx context.Context, tx pgx.Tx, ev Event) (Emitted, error) {
	out, err := EmitManyTx(ctx, tx, []Event{ev})
	if err != nil {
		return Emitted{}, err
	}
	return out[0], nil
}

// EmitManyTx is EmitTx for each of evs, in one round trip (two when
// there are deliveries to enqueue): a batch of effects (a group commit of
// fundings) emits in one statement. Events of one player are numbered in
// the order given.
func EmitManyTx(ctx context.Context, tx pgx.Tx, evs []Event) ([]Emitted, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	q, err := QueueMany(b, evs)
	if err != nil {
		return nil, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("events: write %d events: %w", len(evs), err)
	}
	return q.Finish(ctx, tx)
}

// Queued is EmitManyTx's statement queued on a caller's batch.
type Queued struct {
	evs        []Event
	written    map[string]Emitted
	deliveries []int64
	read       bool
}

// QueueMany queues EmitManyTx's statement for evs on b, for a caller that
// sends the effect's own statements in the same round trip (b must be
// sent in the effect's transaction). After the batch is closed without an
// error, Finish enqueues the delivery jobs and answers as EmitManyTx
// does. No evs queue nothing.
func QueueMany(b *pgx.Batch, evs []Event) (*Queued, error) {
	q := &Queued{evs: evs, written: map[string]Emitted{}}
	if len(evs) == 0 {
		return q, nil
	}
	var ids, types, data []string
	var players []int64
	for _, ev := range evs {
		if err := CheckTypes([]string{ev.Type}); err != nil {
			return nil, err
		}
		raw, err := json.Marshal(ev.Data)
		if err != nil {
			return nil, fmt.Errorf("events: %s data: %w", ev.Type, err)
		}
		if !slices.Contains(ids, ev.ID()) {
			ids, types, players, data = append(ids, ev.ID()), append(types, ev.Type), append(players, ev.PlayerID), append(data, string(raw))
		}
	}
	b.Queue(emitSQL, ids, types, players, data, APIVersion).Query(func(rows pgx.Rows) error {
		var e Emitted
		var ds []int64
		_, err := pgx.ForEachRow(rows, []any{&e.ID, &e.Sequence, &ds}, func() error {
			e.Deliveries, q.deliveries = len(ds), append(q.deliveries, ds...)
			q.written[e.ID] = e
			return nil
		})
		q.read = err == nil
		return err
	})
	return q, nil
}

// Finish enqueues the delivery jobs of the events written, in tx, and
// answers each event of the queued ones: written, or Replayed when it
// existed already (or repeats one before it).
func (q *Queued) Finish(ctx context.Context, tx pgx.Tx) ([]Emitted, error) {
	if len(q.evs) == 0 {
		return nil, nil
	}
	if !q.read {
		return nil, fmt.Errorf("events: %d events queued but their batch was not sent", len(q.evs))
	}
	if err := insertJobs(ctx, tx, q.deliveries); err != nil {
		return nil, err
	}
	out := make([]Emitted, len(q.evs))
	for i, ev := range q.evs {
		id := ev.ID()
		w, ok := q.written[id]
		if !ok {
			w = Emitted{ID: id, Replayed: true}
		}
		out[i], q.written[id] = w, Emitted{ID: id, Replayed: true} // a repeat in evs is a replay
	}
	return out, nil
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
	return len(ids), insertJobs(ctx, tx, ids)
}

// insertJobs inserts the delivery jobs of deliveries ids in tx.
func insertJobs(ctx context.Context, tx pgx.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: DeliverArgs{DeliveryID: id}}
	}
	client, err := inserter()
	if err != nil {
		return fmt.Errorf("events: river client: %w", err)
	}
	if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("events: insert delivery jobs: %w", err)
	}
	return nil
}
