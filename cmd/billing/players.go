package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

func newPlayersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "players",
		Short: "Manage players and their API keys",
	}
	cmd.AddCommand(newPlayersCreateCmd(), newPlayersKeysCmd())
	return cmd
}

func newPlayersCreateCmd() *cobra.Command {
	var name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create --name NAME [--json]",
		Short: `Create a player and print {"player_id":..,"api_key":..} (the key is shown once; only its hash is stored)`,
		Long: `create makes a player and its API key, and prints {"player_id":"..","api_key":".."}
with or without --json: the key is shown this once (only its hash is
stored), so the answer is always in the form a script keeps.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				p, key, err := players.Create(ctx, pool, name)
				if err != nil {
					return err
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
					PlayerID string `json:"player_id"`
					APIKey   string `json:"api_key"`
				}{strconv.FormatInt(p.ID, 10), key})
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the player's name (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON object (the default already)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func newPlayersKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list, revoke and rotate a player's API keys",
		Long: `keys manages the API keys of a player. A player may hold several; each is
shown once, when it is made (create, rotate), and only its hash and its
last four characters are stored. A revoked key, or a rotated key past its
end, answers 401 from its next request on, in every process: the API reads
the key on every request and keeps no cache of it.

To replace a key without an outage: rotate it, give the new key to the
client, and let the old one run out (--old-valid-for, 24h by default), or
revoke it as soon as the client uses the new one. A leaked key: rotate with
--old-valid-for 0, or revoke it.`,
	}
	cmd.AddCommand(newKeysCreateCmd(), newKeysListCmd(), newKeysRevokeCmd(), newKeysRotateCmd())
	return cmd
}

func newKeysCreateCmd() *cobra.Command {
	var player int64
	var asJSON bool
	c := &cobra.Command{
		Use:   "create --player ID [--json]",
		Short: `Give a player one more API key and print {"player_id":..,"key_id":..,"api_key":..} (shown once)`,
		Long: `create makes a new API key for the player, besides the keys it holds, and
prints {"player_id":"..","key_id":"..","api_key":".."} with or without
--json: the key is shown this once (only its hash is stored), so the answer
is always in the form a script keeps. key_id is what revoke and rotate take.
An unknown player exits 1 and changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				var k players.Key
				var key string
				// Printed only once a synchronous standby has the key: a key
				// lost in a failover would be a key that never works.
				err := durable.Do(ctx, pool, func(conn *pgxpool.Conn) (err error) {
					k, key, err = players.CreateKey(ctx, conn, player)
					return err
				})
				if err != nil {
					return err
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(newAPIKeyJSON{PlayerID: strconv.FormatInt(k.PlayerID, 10),
					KeyID: strconv.FormatInt(k.ID, 10), APIKey: key})
			})
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "the player's id (required)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the JSON object (the default already)")
	_ = c.MarkFlagRequired("player")
	return c
}

func newKeysListCmd() *cobra.Command {
	var player int64
	var asJSON bool
	c := &cobra.Command{
		Use:   "list --player ID [--json]",
		Short: "List a player's API keys (never the keys): id, hint, state, created, expires, revoked",
		Long: `list prints every API key of the player, oldest first: its id (what revoke
and rotate take), its hint (bk_… and the key's last four characters, to
tell keys apart or match a leaked one; none for keys made before hints were
kept), its state (active; expiring: rotated, works until expires; expired;
revoked), when it was made, expires and was revoked and why, and the keys
it replaced or was replaced by. An unknown player exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				keys, err := players.ListKeys(ctx, pool, player)
				if err != nil {
					return err
				}
				views := make([]apiKeyJSON, len(keys))
				working := 0
				for i, k := range keys {
					views[i] = viewAPIKey(k)
					if k.State == players.KeyActive || k.State == players.KeyExpiring {
						working++
					}
				}
				return printList(cmd.OutOrStdout(), views, asJSON, apiKeyLine,
					fmt.Sprintf("%s, %d working", count(len(keys), "key"), working))
			})
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "the player's id (required)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	_ = c.MarkFlagRequired("player")
	return c
}

func apiKeyLine(k apiKeyJSON) string {
	s := fmt.Sprintf("id=%d %s %s created=%s", k.ID, k.Hint, k.State, k.CreatedAt.UTC().Format(time.RFC3339))
	if k.ExpiresAt != nil {
		s += " expires=" + k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if k.RevokedAt != nil {
		s += " revoked=" + k.RevokedAt.UTC().Format(time.RFC3339)
	}
	if k.RevokeReason != "" {
		s += fmt.Sprintf(" reason=%q", k.RevokeReason)
	}
	if k.RotatedFrom != "" {
		s += " rotated_from=" + k.RotatedFrom
	}
	if k.RotatedTo != "" {
		s += " rotated_to=" + k.RotatedTo
	}
	return s
}

func newKeysRevokeCmd() *cobra.Command {
	var player, keyID int64
	var reason string
	var asJSON bool
	c := &cobra.Command{
		Use:   "revoke --player ID --key-id K [--reason R] [--json]",
		Short: "Revoke one of a player's API keys now: its next request answers 401",
		Long: `revoke ends the player's key --key-id (id= in 'billing players keys list')
now: every request that starts after revoke returns answers 401, in every
process. Replay-safe: a key revoked already is reported as such and keeps
its first revocation (time and reason). A key of another player, or an
unknown player or key, exits 1 and changes nothing. The player's other keys
keep working; to hand out a replacement use rotate (or create).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				var k players.Key
				var changed bool
				err := durable.Do(ctx, pool, func(conn *pgxpool.Conn) (err error) {
					k, changed, err = players.Revoke(ctx, conn, player, keyID, reason)
					return err
				})
				if err != nil {
					return err
				}
				v := viewAPIKey(k)
				text := fmt.Sprintf("revoked key %d of player %d (%s) at %s: it answers 401 from now on", k.ID, k.PlayerID,
					v.Hint, k.RevokedAt.UTC().Format(time.RFC3339))
				if !changed {
					text = fmt.Sprintf("key %d of player %d (%s) was revoked already, at %s; nothing changed", k.ID, k.PlayerID,
						v.Hint, k.RevokedAt.UTC().Format(time.RFC3339))
				}
				return printResult(cmd.OutOrStdout(), asJSON, struct {
					apiKeyJSON
					Changed bool `json:"changed"`
				}{v, changed}, text)
			})
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "the player's id (required)")
	c.Flags().Int64Var(&keyID, "key-id", 0, "the key's id, from 'billing players keys list' (required)")
	c.Flags().StringVar(&reason, "reason", "", "why, kept with the key and shown in the player's timeline")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	for _, f := range []string{"player", "key-id"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

type rotateFlags struct {
	player, keyID        int64
	validFor, validUntil string
	asJSON               bool
}

func newKeysRotateCmd() *cobra.Command {
	var f rotateFlags
	c := &cobra.Command{
		Use:   "rotate --player ID [--key-id K] [--old-valid-for 24h | --old-valid-until T] [--json]",
		Short: "Replace a player's API key: print the new key once; the old one works until a chosen time",
		Long: `rotate makes a new API key to replace the player's key --key-id (without
--key-id: its one working key that was never rotated), and prints
{"player_id":"..","key_id":"..","api_key":"..","rotated_from":"..","old_expires_at":".."}
with or without --json: the new key is shown this once. The old key keeps
working for --old-valid-for (default 24h; 0: it answers 401 at once; 72h,
7d) or until --old-valid-until (an RFC 3339 time), at most 30 days, so clients
can move to the new key without an outage; revoke ends it sooner.

A key is rotated once: rotating it again, or a revoked key, exits 1 and
changes nothing (rotate its successor instead). An unknown player, a key of
another player, or a player with several keys and no --key-id exits 1 and
changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runKeysRotate(cmd, f) },
	}
	c.Flags().Int64Var(&f.player, "player", 0, "the player's id (required)")
	c.Flags().Int64Var(&f.keyID, "key-id", 0, "the key to replace (default: the player's one key never rotated)")
	c.Flags().StringVar(&f.validFor, "old-valid-for", "24h", "how long the old key keeps working: 0 (not at all), 90m, 24h, 7d")
	c.Flags().StringVar(&f.validUntil, "old-valid-until", "", "when the old key stops working, an RFC 3339 time (instead of --old-valid-for)")
	c.Flags().BoolVar(&f.asJSON, "json", false, "print the JSON object (the default already)")
	c.MarkFlagsMutuallyExclusive("old-valid-for", "old-valid-until")
	_ = c.MarkFlagRequired("player")
	return c
}

func runKeysRotate(cmd *cobra.Command, f rotateFlags) error {
	p := players.RotateParams{PlayerID: f.player, KeyID: f.keyID}
	var err error
	if f.validUntil != "" {
		if p.OldValidUntil, err = time.Parse(time.RFC3339, strings.TrimSpace(f.validUntil)); err != nil {
			return fmt.Errorf("--old-valid-until: %q is not an RFC 3339 time (2026-12-24T18:00:00Z)", f.validUntil)
		}
	} else if p.OldValidFor, err = parseValidFor(f.validFor); err != nil {
		return err
	}
	return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
		r, err := players.Rotate(ctx, pool, p)
		if err != nil {
			return err
		}
		return json.NewEncoder(cmd.OutOrStdout()).Encode(newAPIKeyJSON{PlayerID: strconv.FormatInt(r.New.PlayerID, 10),
			KeyID: strconv.FormatInt(r.New.ID, 10), APIKey: r.APIKey, RotatedFrom: strconv.FormatInt(r.Old.ID, 10),
			OldExpiresAt: r.Old.ExpiresAt})
	})
}

// parseValidFor reads --old-valid-for: a Go duration, 0, or a number of
// days ("7d").
func parseValidFor(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days >= 0 {
			return time.Duration(days) * 24 * time.Hour, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("--old-valid-for: %q is not a duration such as 0, 90m, 24h or 7d", s)
}
