package main

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/players"
)

func newPlayersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "players",
		Short: "Manage players and their API keys",
	}
	cmd.AddCommand(newPlayersCreateCmd())
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
