package timeline_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/ops/timeline"
)

// The player's timeline tells its API keys: made, rotated (and until when
// the old one works), revoked (and why) and expired, in time order, and
// names each by its id and last four characters, never the key.
func TestPlayerTimelineTellsKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	extra, secret, err := players.CreateKey(ctx, e.pool, e.player)
	require.NoError(t, err)
	rot, err := players.Rotate(ctx, e.pool, players.RotateParams{PlayerID: e.player, KeyID: extra.ID, OldValidFor: time.Hour})
	require.NoError(t, err)
	now, err := players.Rotate(ctx, e.pool, players.RotateParams{PlayerID: e.player, KeyID: rot.New.ID})
	require.NoError(t, err)
	_, _, err = players.Revoke(ctx, e.pool, e.player, extra.ID, "leaked in a ticket")
	require.NoError(t, err)

	pl, err := timeline.Player(ctx, e.pool, registry, e.player, time.Time{})
	require.NoError(t, err)
	requireOrdered(t, pl)
	out := text(t, pl)
	for _, s := range []string{secret, rot.APIKey, now.APIKey} {
		require.NotContains(t, out, s[3:], "a key is never shown")
	}
	require.Len(t, ofType(pl, timeline.TypeKeyCreated), 2, out) // the player's first key and extra
	rotated := ofType(pl, timeline.TypeKeyRotated)
	require.Len(t, rotated, 2, out)
	require.Contains(t, rotated[0].Text, "API key "+itoa(rot.New.ID)+" (bk_…"+rot.New.Hint+") created to replace key "+itoa(extra.ID)+
		", which works until ")
	revoked := ofType(pl, timeline.TypeKeyRevoked)
	require.Len(t, revoked, 1, out)
	require.Contains(t, revoked[0].Text, "API key "+itoa(extra.ID))
	require.Equal(t, []string{"reason: leaked in a ticket"}, revoked[0].Details)
	expired := ofType(pl, timeline.TypeKeyExpired)
	require.Len(t, expired, 1, out)
	require.Contains(t, expired[0].Text, "API key "+itoa(rot.New.ID))
	require.Equal(t, timeline.LayerAPIKey, expired[0].Layer)
	require.Contains(t, out, "api_key")

	later, err := timeline.Player(ctx, e.pool, registry, e.player, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Empty(t, ofType(later, timeline.TypeKeyRevoked), "--since keeps only what happened from then on")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
