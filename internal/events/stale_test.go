package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
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
	astray, _ := testkit.StartRiver(t, primary, testkit.RiverOptions{Workers: workers, Queues: map[string]int{events.QueueEvents: 2}})
	sent := emit(t, primary, refunded(1, "former"))

	first := testkit.FirstAttempts(t, primary, 1, "deliver_event")[0]
	require.NotEqual(t, "cancelled", first.State, "cancelled on the former primary: %s", first.Err)
	require.Contains(t, first.Err, jobhold.ErrNotHeld.Error())
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, astray.Stop(stop))

	startWorker(t, primary, events.WorkerOptions{})
	rc.waitAcked(sent.ID)
	rc.requireOneBodyPerID()
}
