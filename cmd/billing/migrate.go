package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/migrations"
)

func newMigrateCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "migrate [--json]",
		Short: "Apply River's and the app's migrations (idempotent; Procfile release)",
		Long: `migrate applies River's migrations, then the app's, under one advisory lock, so
that concurrent runs (several releases at once) apply each migration once.
It prints how many of each it applied (0 and 0 when the database was up to
date); --json prints {"river_applied":[versions],"app_applied":[versions]}.`,
		Args: cobra.NoArgs,
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
			res, err := migrations.Migrate(cmd.Context(), pool, logger)
			if err != nil {
				return err
			}
			river, app := res.RiverVersions, res.AppVersions
			if river == nil {
				river = []int{}
			}
			if app == nil {
				app = []int64{}
			}
			return printResult(cmd.OutOrStdout(), asJSON, struct {
				River []int   `json:"river_applied"`
				App   []int64 `json:"app_applied"`
			}{river, app}, fmt.Sprintf("migrate: applied %s and %s", count(len(river), "River migration"), count(len(app), "app migration")))
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the applied versions as one JSON object")
	return c
}
