// Package jobhold makes a River job's decision count only on the server
// that gave the job out.
//
// A worker reaches the database through its pool and River's completer
// through its own connection, and during a failover they can reach
// different servers: a former primary, frozen and then resumed beside its
// successor, answers read-write for a moment with its data of before the
// loss. A job worked there can find no order, no claim, no delivery, and
// decide to cancel itself. Such a decision writes nothing, so its commit
// waits for no standby and succeeds, while River records the cancel on
// the real primary: the job ends, and what it was for never happens.
//
// LockTx locks the job's row, as River gave it out for this attempt, in the
// decision's transaction. The former primary has no such running attempt,
// so LockTx fails there (ErrNotHeld) and the job runs again; and since the
// lock is a write, the decision's commit waits for a synchronous standby
// like any other (durable.Commit), one that wrote nothing else included.
//
// It reads River's own table, river_job (id, state, attempt), which River
// does not document as an API: the contract test pins that meaning against
// a real River client, as rivercomplete's does for its statement.
package jobhold

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// ErrNotHeld means the server a job's transaction reached does not hold
// the job's running attempt: it is not the primary River gave the job out
// from. The job fails and runs again; nothing it decided there counts.
var ErrNotHeld = errors.New("jobhold: this database server does not hold the job's running attempt " +
	"(a former primary answering beside its successor); the job runs again")

// LockTx locks job's row in tx, as River gave it out for this attempt, or
// fails with ErrNotHeld.
func LockTx(ctx context.Context, tx pgx.Tx, job *rivertype.JobRow) error {
	var held bool
	err := tx.QueryRow(ctx, `SELECT true FROM river_job WHERE id = $1 AND state = 'running' AND attempt = $2
		FOR NO KEY UPDATE`, job.ID, job.Attempt).Scan(&held)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w (job %d, attempt %d)", ErrNotHeld, job.ID, job.Attempt)
	}
	if err != nil {
		return fmt.Errorf("jobhold: lock job %d: %w", job.ID, err)
	}
	return nil
}
