package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/jobs"
)

func newEnforceCmd() *cobra.Command {
	var once, asJSON bool
	var at string
	cmd := &cobra.Command{
		Use:   "enforce --once [--at RFC3339]",
		Short: "Run one enforcer sweep now: enqueue the fund_day job of every unpaid running Marquee",
		Long: `enforce --once runs one sweep of the daily funding enforcer now, as the worker's
periodic job does on BILLING_ENFORCER_SCHEDULE: every running Marquee not paid
through the end of the service day gets its fund_day job (unique per Marquee
and day, so running it again is harmless). A worker process debits them.

--at sweeps the service day containing another instant, for operators
replaying a missed day. Progress is shown on a terminal; the summary line is
printed on stdout (--json: one JSON object, took in milliseconds).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !once {
				return errors.New("enforce: pass --once (the periodic enforcer runs inside `billing worker`)")
			}
			var when time.Time
			if at != "" {
				var err error
				if when, err = time.Parse(time.RFC3339, at); err != nil {
					return fmt.Errorf("enforce: --at: want an RFC3339 instant such as 2024-03-10T12:00:00Z, got %q", at)
				}
			}
			cfg, err := loadConfig(cmd, true)
			if err != nil {
				return err
			}
			return runEnforceOnce(cmd.Context(), cfg, when, cmd.OutOrStdout(), os.Stderr, asJSON)
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "run one sweep and exit")
	cmd.Flags().StringVar(&at, "at", "", "sweep the service day containing this RFC3339 instant (default now)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the summary as one JSON object")
	return cmd
}

// runEnforceOnce sweeps once through an insert-only River client: the jobs
// it enqueues are worked by the worker processes.
func runEnforceOnce(ctx context.Context, cfg *config.Config, at time.Time, out io.Writer, progress *os.File, asJSON bool) error {
	logger := newLogger(cfg, progress).With("process", "enforce")
	pool, err := openPool(ctx, cfg.DatabaseURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := jobs.NewClient(pool, jobs.Options{Logger: logger})
	if err != nil {
		return err
	}
	// The summary goes to stdout below; the service's own log line would repeat it.
	svc := enforcer.New(pool, newWallet(pool, cfg),
		enforcer.Options{TZ: cfg.ServiceDayTZ, Logger: slog.New(slog.DiscardHandler)})
	opts := enforcer.SweepOptions{At: at}
	line := progressTo(progress)
	if line.w != nil {
		// The count is only for the ETA; the sweep itself never holds all rows.
		var total int64
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM marquees WHERE desired_state = 'running'`).Scan(&total)
		opts.Progress = func(r enforcer.SweepResult) {
			line.show("sweeping "+r.Day, int64(r.Seen), total)
		}
	}
	res, err := svc.Sweep(ctx, client, opts)
	line.clear()
	if err != nil {
		return fmt.Errorf("enforce: after %d seen: %w", res.Seen, err)
	}
	return printResult(out, asJSON, struct {
		Day           string `json:"day"`
		Seen          int    `json:"seen"`
		Enqueued      int    `json:"enqueued"`
		AlreadyQueued int    `json:"already_queued"`
		TookMS        int64  `json:"took_ms"`
	}{res.Day, res.Seen, res.Enqueued, res.AlreadyQueued, res.Took.Milliseconds()},
		fmt.Sprintf("enforce: day=%s seen=%d enqueued=%d already_queued=%d took=%s",
			res.Day, res.Seen, res.Enqueued, res.AlreadyQueued, res.Took.Round(time.Millisecond)))
}
