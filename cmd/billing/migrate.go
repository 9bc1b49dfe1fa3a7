package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/migrations"
)

func newMigrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply River's and the app's migrations (idempotent; Procfile release)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, true)
			if err != nil {
				return err
			}
			logger := newLogger(cfg, os.Stderr)
			pool, err := openPool(cmd.Context(), cfg.DatabaseURL, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			_, err = migrations.Migrate(cmd.Context(), pool, logger)
			return err
		},
	}
}
