package events_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/platform/jobhold"
)

// A delivery job's worker can reach a former primary, resumed beside its
// successor during a failover, which lacks the deliveries written since
// it lost its role. Here that server is a second database with the schema
// and none of the primary's rows. Before jobhold, the job was cancelled
// there as "delivery does not exist", on the primary, and the event was
// never sent. Now its attempt fails with jobhold.ErrNotHeld, and the job,
// worked again against the primary, delivers the event.
func TestDeliveryOnAFormerPrimaryIsNotCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, former := testdb.New(t), testdb.New(t)
	rc := newReceiver(t, nil)
	ep := addEndpoint(t, primary, rc.srv.URL)
	rc.trust(ep.Secret)

	workers := river.NewWorkers()
	events.Register(workers, events.WorkerOptions{Pool: former, Logger: testkit.Quiet})
	astray, err := river.NewClient(riverpgxv5.New(primary), &river.Config{
		Queues:  map[string]river.QueueConfig{events.QueueEvents: {MaxWorkers: 2}},
		Workers: workers, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), TestOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, astray.Start(ctx))
	sent := emit(t, primary, refunded(1, "former"))

	var state, firstErr string
	for end := time.Now().Add(deadline); ; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(end), "the delivery's first attempt never ended")
		err := primary.QueryRow(ctx, `SELECT state, coalesce(errors[1]->>'error', '') FROM river_job
			WHERE kind = 'deliver_event' AND (errors IS NOT NULL OR finalized_at IS NOT NULL)`).Scan(&state, &firstErr)
		if !errors.Is(err, pgx.ErrNoRows) {
			require.NoError(t, err)
			break
		}
	}
	require.NotEqual(t, "cancelled", state, "cancelled on the former primary: %s", firstErr)
	require.Contains(t, firstErr, jobhold.ErrNotHeld.Error())
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, astray.Stop(stop))

	startWorker(t, primary, events.WorkerOptions{})
	rc.waitAcked(sent.ID)
	rc.requireOneBodyPerID()
}
