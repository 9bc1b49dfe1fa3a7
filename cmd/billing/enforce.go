package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/jobs"
)

// enforceFlags are enforce's flags.
type enforceFlags struct {
	once, asJSON, dryRun, allowFuture bool
	at                                string
}

func newEnforceCmd() *cobra.Command {
	var f enforceFlags
	cmd := &cobra.Command{
		Use:   "enforce --once [--at RFC3339 [--allow-future]] [--dry-run] [--json]",
		Short: "Run one enforcer sweep now: enqueue the fund_day job of every unpaid running Marquee",
		Long: `enforce --once runs one sweep of the daily funding enforcer now, as the worker's
periodic job does on BILLING_ENFORCER_SCHEDULE: every running Marquee not paid
through the end of the service day gets its fund_day job (unique per Marquee
and day, so running it again is harmless). A worker process debits them.

--at sweeps the service day containing another instant, for operators
replaying a missed day. A day after today (in BILLING_SERVICE_DAY_TZ) is
refused, with nothing enqueued, unless --allow-future is given: the worker
debits those Marquees at once, a day early.

--dry-run enqueues nothing: it prints the day, how many Marquees it would
enqueue and how many are queued already (--json: with the Marquees' ids).
It needs no --allow-future.

Progress is shown on a terminal; the summary line is printed on stdout
(--json: one JSON object, took in milliseconds).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !f.once {
				return errors.New("enforce: pass --once (the periodic enforcer runs inside `billing worker`)")
			}
			when, err := parseAt(f.at)
			if err != nil {
				return err
			}
			cfg, err := loadConfig(cmd, true)
			if err != nil {
				return err
			}
			if err := checkSweepDay(when, time.Now(), cfg.ServiceDayTZ, f.allowFuture || f.dryRun); err != nil {
				return err
			}
			return runEnforceOnce(cmd.Context(), cfg, when, f, cmd.OutOrStdout(), os.Stderr)
		},
	}
	cmd.Flags().BoolVar(&f.once, "once", false, "run one sweep and exit")
	cmd.Flags().StringVar(&f.at, "at", "", "sweep the service day containing this RFC3339 instant (default now)")
	cmd.Flags().BoolVar(&f.allowFuture, "allow-future", false, "let --at name a day after today: its Marquees are charged now")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "print what the sweep would enqueue, and enqueue nothing")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the summary as one JSON object")
	return cmd
}

func parseAt(at string) (time.Time, error) {
	if at == "" {
		return time.Time{}, nil
	}
	when, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return time.Time{}, fmt.Errorf("enforce: --at: want an RFC3339 instant such as 2024-03-10T12:00:00Z, got %q", at)
	}
	return when, nil
}

// errFutureDay is returned for an --at whose service day is after today.
var errFutureDay = errors.New("enforce: --at names a service day after today")

// checkSweepDay refuses an at whose service day in tz comes after now's,
// unless allowed: a mistyped date would otherwise charge every running
// Marquee a day early. The zero at is now.
func checkSweepDay(at, now time.Time, tz *time.Location, allowed bool) error {
	if at.IsZero() || allowed {
		return nil
	}
	day, today := enforcer.ServiceDay(at, tz), enforcer.ServiceDay(now, tz)
	if day <= today { // YYYY-MM-DD compares as text
		return nil
	}
	return fmt.Errorf("%w: %s is in service day %s, today is %s (%s); nothing was enqueued. "+
		"Check the date, see what it would do with --dry-run, or pass --allow-future to charge that day now",
		errFutureDay, at.Format(time.RFC3339), day, today, tz)
}

// runEnforceOnce sweeps once through an insert-only River client: the jobs
// it enqueues are worked by the worker processes.
func runEnforceOnce(ctx context.Context, cfg *config.Config, at time.Time, f enforceFlags, out io.Writer, progress *os.File) error {
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
	opts := enforcer.SweepOptions{At: at, DryRun: f.dryRun}
	planned := []string{}
	if f.dryRun && f.asJSON {
		opts.Planned = func(ids []int64) {
			for _, id := range ids {
				planned = append(planned, strconv.FormatInt(id, 10))
			}
		}
	}
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
	if f.dryRun {
		return printDryRun(out, res, planned, f.asJSON)
	}
	return printResult(out, f.asJSON, struct {
		Day           string `json:"day"`
		Seen          int    `json:"seen"`
		Enqueued      int    `json:"enqueued"`
		AlreadyQueued int    `json:"already_queued"`
		TookMS        int64  `json:"took_ms"`
	}{res.Day, res.Seen, res.Enqueued, res.AlreadyQueued, res.Took.Milliseconds()},
		fmt.Sprintf("enforce: day=%s seen=%d enqueued=%d already_queued=%d took=%s",
			res.Day, res.Seen, res.Enqueued, res.AlreadyQueued, res.Took.Round(time.Millisecond)))
}

// printDryRun reports what a dry-run sweep would have enqueued.
func printDryRun(out io.Writer, res *enforcer.SweepResult, planned []string, asJSON bool) error {
	return printResult(out, asJSON, struct {
		Day           string   `json:"day"`
		DryRun        bool     `json:"dry_run"`
		Seen          int      `json:"seen"`
		WouldEnqueue  int      `json:"would_enqueue"`
		AlreadyQueued int      `json:"already_queued"`
		Marquees      []string `json:"marquees"`
		TookMS        int64    `json:"took_ms"`
	}{res.Day, true, res.Seen, res.Enqueued, res.AlreadyQueued, planned, res.Took.Milliseconds()},
		fmt.Sprintf("enforce: dry run, nothing enqueued: day=%s seen=%d would_enqueue=%d already_queued=%d took=%s",
			res.Day, res.Seen, res.Enqueued, res.AlreadyQueued, res.Took.Round(time.Millisecond)))
}
