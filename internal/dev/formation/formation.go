// Package formation runs a pg_auto_failover formation on one machine: a
// monitor and three PostgreSQL data nodes, a primary and two synchronous
// standbys (number_sync_standbys = 1), for the failover tests, `billing-lab
// chaos --failover`, `billing-lab bench ha` and `billing dev --ha`.
//
// Each node (its pg_autoctl keeper, PostgreSQL and PostgreSQL's server
// processes) runs in a process group of its own, so a test can lose the
// whole machine at once (Kill: SIGKILL), freeze it (Freeze: SIGSTOP,
// Thaw: SIGCONT) and bring it back (Start). As root everything runs as
// the `postgres` system user (internal/dev/pglocal.ForPostgres). Every wait
// is bounded by its context, and a formation never outlives the process
// that started it: a watchdog kills every node's processes when that
// process dies without calling Stop. WaitHealthy also rewinds a former
// primary that pg_auto_failover left unable to follow (rewind.go).
//
// pg_autoctl must be installed (Debian: postgresql-15-auto-failover and
// pg-auto-failover-cli).
package formation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/dev/pglocal"
	"github.com/fibe-dev/billing/internal/dev/procs"
)

// ErrNoPgAutoctl means pg_autoctl is not installed.
var ErrNoPgAutoctl = errors.New("formation: pg_autoctl not found on PATH " +
	"(apt-get install -y postgresql-15-auto-failover pg-auto-failover-cli)")

// Install is how to get pg_autoctl, for messages and skips.
const Install = "apt-get install -y --no-install-recommends postgresql-15-auto-failover pg-auto-failover-cli"

// The application's role and database on every node: a database owner,
// not a superuser.
const (
	Database    = "billing"
	AppUser     = "billing"
	AppPassword = "billing"
)

// Options configure a formation.
type Options struct {
	// Dir holds the monitor's and the nodes' data directories and logs.
	Dir string
	// Timeouts are the monitor's and keepers' failure detection settings;
	// the zero value keeps pg_auto_failover's own (DefaultTimeouts).
	Timeouts Timeouts
	// Fast turns fsync off on the data nodes and checkpoints them every
	// 30 s (a restarted standby replays less): for throwaway formations.
	// Synchronous replication is unchanged.
	Fast bool
	// Ephemeral marks Dir as scratch: should this process die without
	// calling Stop, the watchdog removes Dir after killing the nodes.
	Ephemeral bool
	// MaxConnections of each data node (default 300).
	MaxConnections int
	// Single starts one data node and no standby: a formation that cannot
	// fail over, for tests of the harness's own processes, where each
	// standby would only add a base backup and a keeper's connections.
	Single bool
}

// Formation is a running formation.
type Formation struct {
	opts     Options
	bin      string // pg_autoctl
	pgbin    string // PostgreSQL's bin directory (pg_rewind)
	env      []string
	cred     *syscall.Credential
	monitor  *Node
	nodes    []*Node
	watchdog *procs.Watchdog
	uri      string
	secret   string // the password of postgres and pg_auto_failover's roles (secure.go)
	session  monitorSession
	mu       sync.Mutex
	// lastCheckpoint paces WaitHealthy's checkpoints (several may wait).
	lastCheckpoint time.Time
	// heal is held while WaitHealthy looks for, and rewinds, nodes that
	// cannot follow the primary (rewind.go); rewound lists them.
	heal    sync.Mutex
	rewound []string
}

// Start creates and starts a formation in opts.Dir: the monitor, then the
// first data node (the primary), then two standbys, and returns once the
// primary has both as synchronous standby candidates (with opts.Single,
// once the one data node runs alone).
func Start(ctx context.Context, opts Options) (*Formation, error) {
	if opts.MaxConnections == 0 {
		opts.MaxConnections = 300
	}
	if opts.Timeouts == (Timeouts{}) {
		opts.Timeouts = DefaultTimeouts
	}
	f := &Formation{opts: opts}
	if err := f.prepare(); err != nil {
		return nil, err
	}
	var err error
	if f.watchdog, err = procs.StartWatchdog(watchdogScript, "formation-watchdog", ephemeralDir(opts)); err != nil {
		return nil, err
	}
	if err := f.start(ctx); err != nil {
		f.kill() // f itself, not a nil result: a half-started formation goes at once
		return nil, err
	}
	return f, nil
}

// start starts the monitor and the data nodes and reads the formation's
// URL.
func (f *Formation) start(ctx context.Context) error {
	if err := f.startMonitor(ctx); err != nil {
		return err
	}
	if err := f.startNodes(ctx); err != nil {
		return err
	}
	var err error
	f.uri, err = f.showURI(ctx)
	return err
}

func ephemeralDir(opts Options) string {
	if opts.Ephemeral {
		return opts.Dir
	}
	return ""
}

// prepare finds pg_autoctl and PostgreSQL, makes the directories and the
// environment every pg_autoctl runs with: PostgreSQL's binaries on PATH,
// and pg_autoctl's configuration and state under Dir rather than the
// postgres user's home.
func (f *Formation) prepare() error {
	var err error
	if f.bin, err = exec.LookPath("pg_autoctl"); err != nil {
		return ErrNoPgAutoctl
	}
	binaries, err := pglocal.FindBinaries()
	if err != nil {
		return err
	}
	if f.opts.Dir, err = filepath.Abs(f.opts.Dir); err != nil {
		return err
	}
	home := filepath.Join(f.opts.Dir, "home")
	for _, d := range []string{f.opts.Dir, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("formation: %w", err)
		}
	}
	if err := f.writePassFile(); err != nil {
		return err
	}
	if f.cred, err = pglocal.ForPostgres(f.opts.Dir); err != nil {
		return err
	}
	f.pgbin = filepath.Join(binaries, "bin")
	f.env = append(withoutLibpq(os.Environ()),
		"PATH="+f.pgbin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		"XDG_DATA_HOME="+filepath.Join(home, "data"),
		"XDG_RUNTIME_DIR="+filepath.Join(home, "run"),
		"PGCONNECT_TIMEOUT=5",
		"PGPASSFILE="+f.passFile(),
	)
	return nil
}

// withoutLibpq is environ without libpq's variables (PG...). pg_autoctl
// and the PostgreSQL tools it runs read them, so a PGPASSWORD, PGUSER or
// PGSSLMODE exported in the operator's shell would win over the
// formation's password file and settings: with a PGPASSWORD, a standby's
// base backup fails to authenticate as the replication role. The
// formation's processes get its own (PGPASSFILE, PGCONNECT_TIMEOUT).
func withoutLibpq(environ []string) []string {
	var kept []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "PG") {
			kept = append(kept, kv)
		}
	}
	return kept
}

// startMonitor starts the monitor and sets its failure detection.
func (f *Formation) startMonitor(ctx context.Context) error {
	port, err := procs.FreePort()
	if err != nil {
		return err
	}
	f.monitor = f.newNode("monitor", port, "create", "monitor", "--pgdata", f.path("monitor"),
		"--pgport", fmt.Sprint(port), "--hostname", "localhost", "--listen", listenAddresses, "--auth", authMethod,
		"--no-ssl", "--run")
	if err := f.monitor.launch(); err != nil {
		return err
	}
	// autoctl_node can connect once pg_autoctl has made the monitor.
	if err := waitConnect(ctx, f.monitor, f.MonitorURL()); err != nil {
		return err
	}
	// The superuser too: autoctl_node may connect while pg_autoctl is
	// still rewriting the monitor's pg_hba.conf, and one suite run saw the
	// superuser's first connection refused there ("no pg_hba.conf entry").
	if err := waitConnect(ctx, f.monitor, f.monitorAdminURL()); err != nil {
		return err
	}
	if err := f.requirePasswords(ctx, f.monitorAdminURL(), f.monitor.dir, "postgres", "autoctl_node"); err != nil {
		return err
	}
	return f.opts.Timeouts.applyToMonitor(ctx, f.monitorAdminURL())
}

// startNodes starts the first data node, gives it the application's role
// and settings, then the two standbys (none when Single), and waits for
// the formation to settle (WaitHealthy).
func (f *Formation) startNodes(ctx context.Context) error {
	count := 3
	if f.opts.Single {
		count = 1
	}
	for i := 1; i <= count; i++ {
		port, err := procs.FreePort()
		if err != nil {
			return err
		}
		name := fmt.Sprintf("node%d", i)
		f.nodes = append(f.nodes, f.newNode(name, port, "create", "postgres", "--pgdata", f.path(name),
			"--pgport", fmt.Sprint(port), "--hostname", "localhost", "--listen", listenAddresses, "--name", name,
			"--auth", authMethod, "--no-ssl",
			"--monitor", f.MonitorURL(), "--dbname", Database, "--run"))
	}
	first := f.nodes[0]
	if err := first.launch(); err != nil {
		return err
	}
	if err := f.waitState(ctx, "the first node to run alone", func(s []State) bool {
		return len(s) == 1 && s[0].Reported == "single" && s[0].Goal == "single"
	}); err != nil {
		return err
	}
	if err := f.setUpPrimary(ctx, first); err != nil {
		return err
	}
	for _, n := range f.nodes[1:] {
		if err := n.launch(); err != nil {
			return err
		}
	}
	return f.WaitHealthy(ctx)
}

// setUpPrimary creates the application's role, applies the data nodes'
// settings and requires passwords on the first node, before any standby
// copies it, and restarts its PostgreSQL for max_connections.
func (f *Formation) setUpPrimary(ctx context.Context, n *Node) error {
	stmts := []string{
		fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, AppUser, AppPassword),
		fmt.Sprintf(`ALTER DATABASE %s OWNER TO %s`, Database, AppUser),
		fmt.Sprintf(`ALTER SYSTEM SET max_connections = %d`, f.opts.MaxConnections),
	}
	if f.opts.Fast {
		stmts = append(stmts, `ALTER SYSTEM SET fsync = off`,
			// A standby the keeper restarts (to report its LSN, to follow
			// a new primary) replays the WAL since its last restartpoint
			// before it reaches the new timeline, and a restartpoint comes
			// only after a checkpoint: with the default 5 minutes, a
			// formation under load replays minutes of WAL on a starved
			// machine before it can be whole again.
			`ALTER SYSTEM SET checkpoint_timeout = '30s'`)
	}
	if err := execAll(ctx, n.AdminURL(), stmts...); err != nil {
		return err
	}
	if err := f.requirePasswords(ctx, n.AdminURL(), n.dir, "postgres", "pgautofailover_replicator"); err != nil {
		return err
	}
	if err := n.stop(syscall.SIGINT, time.Minute); err != nil {
		return err
	}
	n.args = []string{"run", "--pgdata", n.dir}
	if err := n.launch(); err != nil {
		return err
	}
	return waitConnect(ctx, n, n.AdminURL())
}

// showURI is `pg_autoctl show uri --formation default`, with the
// application's credentials. It asks the monitor, which a busy machine
// can leave unanswered for a while (pg_autoctl exits 6, a monitor error):
// it asks again every second until ctx ends.
func (f *Formation) showURI(ctx context.Context) (string, error) {
	var out []byte
	var err error
	for {
		cmd := exec.CommandContext(ctx, f.bin, "show", "uri", "--formation", "default", "--pgdata", f.path("monitor"))
		cmd.Env = f.env
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
		if out, err = cmd.Output(); err == nil {
			break
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(exit.Stderr))
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("formation: pg_autoctl show uri: %w", err)
		case <-time.After(time.Second):
		}
	}
	u, err := url.Parse(strings.TrimSpace(string(out)))
	if err != nil {
		return "", fmt.Errorf("formation: pg_autoctl show uri printed %q: %w", out, err)
	}
	u.User = url.UserPassword(AppUser, AppPassword)
	return u.String(), nil
}

// URL is the formation's multi-host URL as `pg_autoctl show uri
// --formation default` prints it (every data node, target_session_attrs
// read-write), with the application's credentials: what
// BILLING_DATABASE_URL takes.
func (f *Formation) URL() string { return f.uri }

// MonitorURL is the monitor's URL, as the keepers reach it, password
// included: what `pg_autoctl show state --monitor` takes.
func (f *Formation) MonitorURL() string {
	return fmt.Sprintf("postgres://autoctl_node:%s@localhost:%d/pg_auto_failover?sslmode=disable", f.secret, f.monitor.Port)
}

func (f *Formation) monitorAdminURL() string {
	return fmt.Sprintf("postgres://postgres:%s@localhost:%d/pg_auto_failover?sslmode=disable", f.secret, f.monitor.Port)
}

// Nodes are the data nodes, node1 to node3.
func (f *Formation) Nodes() []*Node { return f.nodes }

// Monitor is the monitor's node (losing it stops failovers, not service).
func (f *Formation) Monitor() *Node { return f.monitor }

// Dir is where the formation lives.
func (f *Formation) Dir() string { return f.opts.Dir }

func (f *Formation) path(name string) string { return filepath.Join(f.opts.Dir, name) }

// Stop stops every node and the monitor (fast shutdown), then the
// watchdog; a node that does not stop in time is killed. A formation
// that is Ephemeral is removed with it.
func (f *Formation) Stop() error {
	f.session.Close()
	var errs []error
	for _, n := range append(append([]*Node{}, f.nodes...), f.monitor) {
		if n == nil {
			continue
		}
		_ = n.Thaw()
		if err := n.stop(syscall.SIGINT, 30*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	f.watchdog.Finish(len(errs) == 0)
	if f.opts.Ephemeral {
		_ = os.RemoveAll(f.opts.Dir)
	}
	return errors.Join(errs...)
}

// kill tears a half-started formation down at once.
func (f *Formation) kill() {
	f.session.Close()
	for _, n := range append(append([]*Node{}, f.nodes...), f.monitor) {
		if n != nil {
			_ = n.Kill()
		}
	}
	f.watchdog.Finish(false)
}

// execAll runs stmts on url, each on its own (ALTER SYSTEM runs outside
// a transaction).
func execAll(ctx context.Context, url string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("formation: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range append(stmts, `SELECT pg_reload_conf()`) {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("formation: %s: %w", s, err)
		}
	}
	return nil
}

// waitConnect waits until url accepts a connection, failing early when n
// exits.
func waitConnect(ctx context.Context, n *Node, url string) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, url)
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if !n.Running() {
			return fmt.Errorf("formation: %s exited while starting (see %s): %w", n.Name, n.logPath(), n.proc.ExitErr())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("formation: %s not accepting connections (see %s): %w (last: %v)", n.Name, n.logPath(), ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logFile opens name's log in Dir for appending.
func (f *Formation) logFile(name string) (io.Writer, error) {
	return os.OpenFile(f.path(name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
}
