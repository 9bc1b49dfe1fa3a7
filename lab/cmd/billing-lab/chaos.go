package main

import (
	"encoding/json"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/lab/e2e"
)

func newChaosCmd() *cobra.Command {
	var opts e2e.Options
	var keep, asJSON bool
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run the whole system as real processes under kill -9, a web crash and a PostgreSQL restart, then check it",
		Long: `chaos starts its own PostgreSQL, 2 web and 3 worker processes of the billing binary,
drives a seeded workload (webhooks delivered 2-5 times to both web processes,
SDK calls through a proxy that drops committed responses), kills workers with
SIGKILL every few seconds, kills a web process once, restarts PostgreSQL once,
then checks the database against a model of what was acknowledged. It prints
a table and the verdict; exit 1 on FAIL. The same seed reproduces the workload.

With --failover it runs on a pg_auto_failover formation instead (pg_autoctl
must be installed): a monitor and three data nodes, 2 web and 2 worker
processes on its multi-host URL, and per round the primary's machine killed,
commits whose synchronous wait is cancelled, the primary frozen and resumed
beside its successor, a standby then the primary killed. Every operation is
recorded with its key and outcome; unknown ones are replayed by key; on the
final primary every acknowledged effect must be there once, and every lost
node back as a standby. The load lasts until the faults are done (--duration
caps it, by default 15m per round: a busy machine makes each fault slower). A longer run: --failover --failovers 5.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Failover && !cmd.Flags().Changed("duration") {
				// The load lasts until the faults are done; this only caps it.
				opts.Duration = time.Duration(max(opts.Failovers, 1)) * 15 * time.Minute
			}
			if opts.Seed == 0 {
				opts.Seed = time.Now().UnixNano() % 1_000_000
			}
			dir, err := os.MkdirTemp("", "billing-chaos-")
			if err != nil {
				return err
			}
			opts.Dir = dir
			if opts.Binary, err = billingBinary(cmd, dir); err != nil {
				return err
			}
			opts.Out = cmd.ErrOrStderr()
			cmd.PrintErrf("chaos: logs in %s\n", dir)
			rep, err := e2e.Execute(cmd.Context(), opts)
			if rep != nil {
				if perr := printChaos(cmd.OutOrStdout(), rep, asJSON); perr != nil && err == nil {
					err = perr
				}
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				return exitError{code: 1}
			}
			if !keep {
				os.RemoveAll(dir)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.Duration, "duration", time.Minute, "how long the workload and the faults run")
	f.DurationVar(&opts.Settle, "settle", 2*time.Minute, "how long the system may take to finish its work afterwards")
	f.IntVar(&opts.Players, "players", 8, "players driving the workload")
	f.Int64Var(&opts.Seed, "seed", 0, "workload seed (0: random, printed first)")
	f.DurationVar(&opts.WorkerKillEvery, "kill-every", 3*time.Second, "mean interval between worker SIGKILLs")
	f.Float64Var(&opts.DropRate, "drop-rate", 0.2, "share of SDK POST responses dropped after the server committed")
	f.BoolVar(&opts.Failover, "failover", false, "run on a pg_auto_failover formation (pg_autoctl) and lose its primary instead: kill -9, SIGSTOP, a standby then the primary, cancelled synchronous waits")
	f.IntVar(&opts.Failovers, "failovers", 1, "with --failover: rounds of the failover faults (each round loses the primary three times); the load lasts until they are done, at most --duration")
	f.BoolVar(&keep, "keep", false, "keep the logs and data directory after a passing run")
	f.BoolVar(&asJSON, "json", false, "print the report as one JSON object (ok, then the counts and checks)")
	return cmd
}

// printChaos prints the report: a table and the verdict, or JSON.
func printChaos(out io.Writer, rep *e2e.Report, asJSON bool) error {
	if !asJSON {
		rep.Print(out)
		return nil
	}
	return json.NewEncoder(out).Encode(struct {
		OK bool `json:"ok"`
		*e2e.Report
	}{rep.OK(), rep})
}
