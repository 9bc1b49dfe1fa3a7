package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/dev/pglocal"
	"github.com/fibe-dev/billing/internal/platform/instancelock"
	"github.com/fibe-dev/billing/migrations"
)

// Files billing dev keeps in its --dir, beside the cluster's data.
const (
	devLockFile = "dev.lock"     // the instance lock: pid and API URL of the running dev
	devURLFile  = "database.url" // the embedded database's full URL (mode 0600)
)

// devPGPortEnv is the variable of --pg-port.
const devPGPortEnv = "BILLING_DEV_PG_PORT"

type devOptions struct {
	dir    string
	pgPort int
	ha     bool // on a pg_auto_failover formation (dev_ha.go)
}

func newDevCmd() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything locally: an embedded PostgreSQL, migrations, a demo player, web + worker in one process",
		Long: `dev starts a private PostgreSQL from this machine's binaries (data kept under
--dir across restarts), migrates it, seeds a demo player, and runs the web
server and the worker in one process. Ctrl-C stops everything cleanly.
Set BILLING_DATABASE_URL to use an existing server instead.

It listens on ` + config.DevHTTPAddr + ` (loopback only) unless BILLING_HTTP_ADDR or
--http-addr says otherwise: its simulated checkout mints Mana without a
payment. The embedded database keeps its port across restarts, and its full
URL is written to <dir>/` + devURLFile + ` (mode 0600) for the other commands:
export BILLING_DATABASE_URL="$(cat .billing-dev/` + devURLFile + `)".

One dev runs per --dir: a second one on the same directory exits with one
line naming the running one and changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.portFromEnv(cmd); err != nil {
				return err
			}
			return runDev(cmd.Context(), cmd, o)
		},
	}
	cmd.Flags().StringVar(&o.dir, "dir", ".billing-dev", "where dev keeps its state: the embedded PostgreSQL's data, demo.json, "+devURLFile)
	cmd.Flags().BoolVar(&o.ha, "ha", false, "run on a fresh pg_auto_failover formation (monitor + 3 data nodes on loopback, with passwords; needs pg_autoctl) instead, its URL in "+devURLFile+", and print how to lose its primary")
	cmd.Flags().IntVar(&o.pgPort, "pg-port", 0, "port of the embedded PostgreSQL (env "+devPGPortEnv+"; default: the one kept from the last start, else a free one)")
	cmd.AddCommand(newDevSendWebhookCmd())
	return cmd
}

// portFromEnv reads BILLING_DEV_PG_PORT when --pg-port is not given.
func (o *devOptions) portFromEnv(cmd *cobra.Command) error {
	v := strings.TrimSpace(os.Getenv(devPGPortEnv))
	if cmd.Flags().Changed("pg-port") || v == "" {
		return o.checkPort()
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%s: want a port number, got %q", devPGPortEnv, v)
	}
	o.pgPort = n
	return o.checkPort()
}

func (o *devOptions) checkPort() error {
	if o.pgPort < 0 || o.pgPort > 65535 {
		return fmt.Errorf("--pg-port: want 1 to 65535 (0: keep the last one), got %d", o.pgPort)
	}
	return nil
}

// devConfig is dev's configuration: the web process's, but listening on
// loopback unless told otherwise.
func devConfig(cmd *cobra.Command) (*config.Config, error) {
	return load(cmd.Flags(), config.Options{HTTPAddr: config.DevHTTPAddr})
}

func runDev(ctx context.Context, cmd *cobra.Command, o devOptions) error {
	cfg, err := devConfig(cmd)
	if err != nil {
		return err
	}
	base := newLogger(cfg, os.Stderr)
	logger := base.With("process", "dev")
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	lock, err := lockDev(o.dir)
	if err != nil {
		return err
	}
	defer lock.Release()
	// Bound before anything else starts, so that the lock can name it and a
	// taken address fails before a cluster is started for nothing.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http_addr: %w", err)
	}
	defer ln.Close()
	apiURL := devURL(ln.Addr().String())
	if err := lock.SetAddr(apiURL); err != nil {
		return err
	}
	b := devBanner{cfg: cfg, api: apiURL, addr: ln.Addr().String(), dir: o.dir}
	if cfg.DatabaseURL == "" && o.ha {
		stop, err := startDevHA(ctx, cfg, o.dir, cmd.OutOrStdout(), &b)
		if err != nil {
			return err
		}
		defer stop()
	}
	if cfg.DatabaseURL == "" {
		stop, err := startDevDatabase(cfg, o, logger)
		if err != nil {
			return err
		}
		defer stop()
		b.urlFile = filepath.Join(o.dir, devURLFile)
	}
	return serveDev(ctx, cmd.OutOrStdout(), cfg, ln, base, &b)
}

// serveDev migrates, seeds the demo, prints the banner and runs web and
// worker until ctx ends.
func serveDev(ctx context.Context, out io.Writer, cfg *config.Config, ln net.Listener, base *slog.Logger, b *devBanner) error {
	logger := base.With("process", "dev")
	if cfg.RiverUIUser == "" {
		// The dev UI is always mounted, behind credentials made for this run.
		cfg.RiverUIUser, cfg.RiverUIPassword = "admin", randomHex(12)
	}
	pool, err := openPool(ctx, cfg.DatabaseURL, 40)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	metricsAddr, stopOps, err := serveOps(devMetricsAddr(cfg), pool, logger)
	if err != nil {
		return err
	}
	defer stopOps()
	if b.seed, err = loadDemo(ctx, pool, b.dir); err != nil {
		return err
	}
	// Before the drivers are built: they verify deliveries with these.
	b.seed.useDevSecrets(cfg)
	a := newApp(cfg, pool)
	if err := b.seed.seed(ctx, a, b.dir, b.addr); err != nil {
		return err
	}
	b.metrics = devURL(metricsAddr)
	b.print(out)

	web, worker := base.With("process", "web"), base.With("process", "worker")
	g, gctx := errgroup.WithContext(ctx)
	webOpts, err := withDevEvents(ctx, a, withDevCheckout(a, a.apiOptions(web), b.api, web), b.api, web)
	if err != nil {
		return err
	}
	g.Go(func() error { return runWeb(gctx, a, webOpts, ln, web) })
	g.Go(func() error { return runWorker(gctx, a, worker) })
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// lockDev makes this the one billing dev of dir. Another live one is
// refused with a line naming it; the lock of one that died is free.
func lockDev(dir string) (*instancelock.Lock, error) {
	l, err := instancelock.Acquire(filepath.Join(dir, devLockFile))
	var held *instancelock.HeldError
	if errors.As(err, &held) {
		api := held.Holder.Addr
		if api == "" {
			api = "not listening yet"
		}
		return nil, fmt.Errorf("billing dev is already running in %s (pid %d, API %s); use that one, stop it, or give this one another --dir",
			dir, held.Holder.PID, api)
	}
	return l, err
}

// startDevDatabase starts the embedded cluster on the port kept from the
// last start (or --pg-port), writes its URL to <dir>/database.url and
// points cfg at it. stop stops the cluster.
func startDevDatabase(cfg *config.Config, o devOptions, logger *slog.Logger) (stop func(), err error) {
	port, fallback := o.pgPort, false
	if port == 0 {
		port, fallback = keptPort(o.dir), true
	}
	srv, err := startDevPostgres(o.dir, port, fallback)
	if err != nil {
		return nil, err
	}
	stop = func() {
		if err := srv.Stop(); err != nil {
			logger.Error("stop postgres", "error", err)
			return
		}
		logger.Info("postgres stopped")
	}
	if fallback && port != 0 && srv.Port() != port {
		logger.Warn("the kept PostgreSQL port is taken by another program; using another", "kept", port, "port", srv.Port())
	}
	cfg.DatabaseURL = srv.URL()
	if err := writeDatabaseURL(o.dir, cfg.DatabaseURL); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// keptPort is the port of the URL in <dir>/database.url, 0 if none.
func keptPort(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, devURLFile))
	if err != nil {
		return 0
	}
	u, err := url.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	port, _ := strconv.Atoi(u.Port())
	return port
}

// writeDatabaseURL writes the full URL, password included, readable only
// by its owner.
func writeDatabaseURL(dir, dbURL string) error {
	path := filepath.Join(dir, devURLFile)
	if err := os.WriteFile(path, []byte(dbURL+"\n"), 0o600); err != nil {
		return err
	}
	return os.Chmod(path, 0o600) // WriteFile sets the mode only on a new file
}

func startDevPostgres(dir string, port int, fallback bool) (*pglocal.Server, error) {
	logFile, err := os.OpenFile(filepath.Join(dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	srv, err := pglocal.Start(pglocal.Options{Dir: dir, Log: logFile, Port: port, PortFallback: fallback})
	if err != nil {
		logFile.Close()
		if errors.Is(err, pglocal.ErrNoBinaries) {
			return nil, err
		}
		if !fallback && port != 0 {
			err = fmt.Errorf("%w (choose another with --pg-port or %s)", err, devPGPortEnv)
		}
		return nil, fmt.Errorf("%w (log: %s)", err, filepath.Join(dir, "postgres.log"))
	}
	return srv, nil
}

// devMetricsAddr is where dev serves /metrics: BILLING_METRICS_ADDR, or a
// free loopback port (printed in the banner) so two dev runs never clash.
func devMetricsAddr(cfg *config.Config) string {
	if cfg.MetricsAddr != "" {
		return cfg.MetricsAddr
	}
	return "127.0.0.1:0"
}

func redactURL(u string) string {
	if i, j := strings.Index(u, "://"), strings.LastIndex(u, "@"); i >= 0 && j > i {
		if k := strings.Index(u[i+3:j], ":"); k >= 0 {
			return u[:i+3+k+1] + "***" + u[j:]
		}
	}
	return u
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}
