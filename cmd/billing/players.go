package main

import (
	"encoding/json"
	"strconv"

	"github.com/spf13/cobra"

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
	cmd := &cobra.Command{
		Use:   "create --name NAME",
		Short: `Create a player and print {"player_id":..,"api_key":..} (the key is shown once; only its hash is stored)`,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, true)
			if err != nil {
				return err
			}
			pool, err := openPool(cmd.Context(), cfg.DatabaseURL, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			p, key, err := players.Create(cmd.Context(), pool, name)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
				PlayerID string `json:"player_id"`
				APIKey   string `json:"api_key"`
			}{strconv.FormatInt(p.ID, 10), key})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the player's name (required)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}
