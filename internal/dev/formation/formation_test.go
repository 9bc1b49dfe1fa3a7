package formation_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/formation"
	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/kit/proctest"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// TestMain runs the package's tests with libpq's variables set as an
// operator's shell might have them: the formation's processes must not
// see them (a PGPASSWORD would win over the formation's password file, and
// a standby's base backup would fail to authenticate). The tests' own
// connections name every one of these in their URLs.
func TestMain(m *testing.M) {
	for k, v := range map[string]string{"PGPASSWORD": "not-the-formations", "PGUSER": "nobody",
		"PGDATABASE": "nowhere", "PGSSLMODE": "require"} {
		if err := os.Setenv(k, v); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

func start(t *testing.T) *formation.Formation {
	t.Helper()
	proctest.Slow(t, "starts a pg_auto_failover formation")
	proctest.RequireTool(t, formation.Install, "pg_autoctl")
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	f, err := formation.Start(ctx, formation.Options{Dir: filepath.Join(t.TempDir(), "formation"),
		Timeouts: formation.TestTimeouts, Fast: true, Ephemeral: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Stop()) })
	return f
}

// TestFormation runs its cases one after another on one formation: a
// formation is the costliest fixture of the suite (a monitor and three
// data nodes whose keepers and health checks connect several times a
// second while it lives), and each case leaves it whole for the next. A
// case that fails stops the rest, which would meet a broken formation;
// `-run TestFormation/<case>` runs one case on a formation of its own.
func TestFormation(t *testing.T) {
	t.Parallel()
	f := start(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T, *formation.Formation)
	}{
		{"Failover", testFailover},
		{"DivergedFormerPrimaryIsRewound", testDivergedFormerPrimaryIsRewound},
		{"RewoundNodeStreamsFromTheSource", testRewoundNodeStreamsFromTheSource},
	} {
		if !t.Run(c.name, func(t *testing.T) { c.run(t, f) }) {
			return
		}
	}
}

// testFailover: a formation of three data nodes runs synchronous
// replication to either standby; its multi-host URL reaches the primary;
// when the primary's machine is lost (every process SIGKILLed), a standby
// is promoted with every committed row, writes through the same URL
// succeed again, and the lost node rejoins as a standby. A frozen primary
// (SIGSTOP) is replaced the same way and, thawed, rejoins too.
func testFailover(t *testing.T, f *formation.Formation) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cfg, err := pgx.ParseConfig(f.URL())
	require.NoError(t, err)
	ports := map[uint16]bool{cfg.Port: true}
	for _, fb := range cfg.Fallbacks {
		ports[fb.Port] = true
	}
	require.Len(t, ports, 3, "every data node: %s", f.URL())
	require.Contains(t, f.URL(), "target_session_attrs=read-write")
	require.NotNil(t, cfg.ValidateConnect, "pgx checks each host is read-write")

	primary, err := f.Primary(ctx)
	require.NoError(t, err)
	require.NotNil(t, primary)
	requireOneMonitorSession(t, ctx, f)
	var names string
	require.NoError(t, queryRow(ctx, primary.AdminURL(), `SHOW synchronous_standby_names`, &names))
	require.True(t, strings.HasPrefix(names, "ANY 1 ("), "synchronous_standby_names = %q", names)
	requireLocked(t, ctx, f)
	for _, n := range f.Nodes() {
		// Fast: the standbys have the primary's settings from their base
		// backup, so a restarted one replays at most 30 s of WAL.
		var every string
		require.NoError(t, queryRow(ctx, n.AdminURL(), `SHOW checkpoint_timeout`, &every))
		require.Equal(t, "30s", every, n.Name)
	}

	pool := newPool(t, f.URL())
	_, err = pool.Exec(ctx, `CREATE TABLE notes (id bigint PRIMARY KEY)`)
	require.NoError(t, err)
	insert(t, ctx, pool, "notes", 1)

	for i, lose := range []func(*formation.Node) error{(*formation.Node).Kill, (*formation.Node).Freeze} {
		lost := time.Now()
		require.NoError(t, lose(primary))
		next, err := f.WaitPrimary(ctx, primary)
		require.NoError(t, err)
		replaced, err := f.Replaced(ctx, primary)
		require.NoError(t, err)
		require.True(t, replaced, "the monitor promoted %s and no longer has %s as primary", next.Name, primary.Name)
		insert(t, ctx, pool, "notes", int64(i+2))
		t.Logf("%s lost: writes back on %s after %v", primary.Name, next.Name, time.Since(lost).Round(100*time.Millisecond))
		var n int
		require.NoError(t, queryRow(ctx, next.AdminURL(), `SELECT count(*) FROM notes`, &n))
		require.Equal(t, i+2, n, "every committed row is on the new primary")

		if i == 0 {
			requireDiagnosis(t, ctx, f, primary)
		}
		require.NoError(t, primary.Thaw())
		if !primary.Running() {
			require.NoError(t, primary.Start())
		}
		require.NoError(t, f.WaitHealthy(ctx))
		standbys, err := f.Standbys(ctx)
		require.NoError(t, err)
		require.Contains(t, standbys, primary, "the old primary rejoined as a standby")
		primary = next
	}
}

// requireDiagnosis: while lost is down the formation cannot be whole, and
// a wait for it that runs out says why: lost's keeper is not running, the
// monitor's last events name the failover it ran, and the ends of lost's
// keeper's and PostgreSQL's logs are there, as it never reported the
// state it was told.
func requireDiagnosis(t *testing.T, ctx context.Context, f *formation.Formation, lost *formation.Node) {
	t.Helper()
	// Long enough for a poll of the monitor on a busy machine; the wait
	// cannot end sooner, as lost is down.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := f.WaitHealthy(wctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "keeper of "+lost.Name+" not running")
	require.ErrorContains(t, err, "monitor's last events:")
	// The lost node never reported the state it was told (its keeper is
	// dead), so the error carries the end of its log.
	require.ErrorContains(t, err, lost.Name+" (primary, told ")
	require.Regexp(t, `the end of its log:\n  \S+`, err.Error())
	require.Regexp(t, `the end of its PostgreSQL's log:\n  \S+`, err.Error(), "what its PostgreSQL said last")
	events, err := f.Events(ctx, 50)
	require.NoError(t, err)
	require.NotEmpty(t, events)
	require.Contains(t, strings.Join(events, "\n"), "prepare_promotion", "the failover is in the monitor's events")
}

// requireLocked: the monitor and every data node listen on loopback only
// and refuse a connection without a password, for every role.
func requireLocked(t *testing.T, ctx context.Context, f *formation.Formation) {
	t.Helper()
	servers := map[string]string{"monitor": f.MonitorURL()}
	for _, n := range f.Nodes() {
		servers[n.Name] = n.AdminURL()
	}
	for name, url := range servers {
		var listen string
		require.NoError(t, queryRow(ctx, url, `SHOW listen_addresses`, &listen), name)
		require.Equal(t, "localhost", listen, "%s listens on loopback only", name)
		cfg, err := pgx.ParseConfig(url)
		require.NoError(t, err)
		for _, user := range []string{"postgres", formation.AppUser, "autoctl_node", "pgautofailover_replicator"} {
			cfg := cfg.Copy()
			cfg.User, cfg.Password = user, ""
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err == nil {
				conn.Close(ctx)
			}
			require.ErrorContains(t, err, "password", "%s lets %s in without a password", name, user)
		}
	}
	for _, n := range f.Nodes() {
		var one int
		require.NoError(t, queryRow(ctx, n.URL(), `SELECT 1`, &one), "the application's role with its password")
	}
}

// insert writes a row into table through pool, retrying (bounded by ctx)
// while the pool finds its way to the new primary.
func insert(t *testing.T, ctx context.Context, pool *pgxpool.Pool, table string, id int64) {
	t.Helper()
	var last error
	for ctx.Err() == nil {
		tx, err := pool.Begin(ctx)
		if err == nil {
			if _, err = tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1) ON CONFLICT DO NOTHING`, id); err == nil {
				if err = durable.Commit(ctx, tx); err == nil {
					return
				}
			}
			_ = tx.Rollback(ctx)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("insert %d: %v (last: %v)", id, ctx.Err(), last)
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	durable.Configure(cfg, nil)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func queryRow(ctx context.Context, url, sql string, dst any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dst)
}

// startDeadline bounds a formation's start (a monitor, three nodes, two
// base backups): under a minute on an idle machine, more than 3 minutes
// with two suites at once (load 50).
const startDeadline = 6 * time.Minute

// logDeadline bounds the wait for a line a dead server's logging collector
// still had to write: the collector flushes and exits within moments of
// the postmaster, so a start that failed for another reason fails the
// test in a minute, not in startDeadline.
const logDeadline = time.Minute

// cleanupDeadline bounds the wait for a dead starter's formation to go:
// on an idle machine it takes about a second, but the watchdog walks
// /proc in a shell, which a machine at load 30 slows a hundredfold. The
// test is about whether the formation goes, not how fast.
const cleanupDeadline = 3 * time.Minute

// TestFormationDiesWithItsStarter: a helper process (this test binary,
// re-run) starts an ephemeral formation, freezes one node, and is
// SIGKILLed; every process of the formation, frozen or not, goes (within
// cleanupDeadline) and its directory is removed.
func TestFormationDiesWithItsStarter(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "starts a pg_auto_failover formation")
	proctest.RequireTool(t, formation.Install, "pg_autoctl")
	dir := filepath.Join(t.TempDir(), "formation")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartFormation$", "-test.v")
	cmd.Env = append(os.Environ(), "FORMATION_HELPER_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pids := readPids(t, out)
	require.NotEmpty(t, pids)

	require.NoError(t, cmd.Process.Kill())
	_, _ = io.Copy(io.Discard, out)
	_ = cmd.Wait()
	require.Eventually(t, func() bool {
		for _, pid := range pids {
			if alive(pid) {
				return false
			}
		}
		return true
	}, cleanupDeadline, 100*time.Millisecond, "a process of the formation outlived its starter by %v", cleanupDeadline)
	require.Eventually(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) },
		cleanupDeadline, 50*time.Millisecond, "the ephemeral directory is still there %v after its starter died", cleanupDeadline)
}

// TestHelperStartFormation is the helper process of TestFormationDiesWithItsStarter.
func TestHelperStartFormation(t *testing.T) {
	dir := os.Getenv("FORMATION_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process of TestFormationDiesWithItsStarter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	// One data node: what is tested is that every process goes, and a
	// standby would only add processes of the same kinds.
	f, err := formation.Start(ctx, formation.Options{Dir: dir, Timeouts: formation.TestTimeouts, Fast: true,
		Ephemeral: true, Single: true})
	require.NoError(t, err)
	require.Len(t, f.Nodes(), 1)
	require.NoError(t, f.Nodes()[0].Freeze())
	var pids []string
	for _, pid := range procs.Descendants(os.Getpid()) {
		pids = append(pids, fmt.Sprint(pid))
	}
	fmt.Printf("pids %s\n", strings.Join(pids, " "))
	time.Sleep(10 * time.Minute) // until killed: the sleep only outlasts the test's wait
}

func readPids(t *testing.T, r io.Reader) []int {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "pids "); ok {
			var pids []int
			for _, f := range strings.Fields(rest) {
				var pid int
				fmt.Sscan(f, &pid)
				pids = append(pids, pid)
			}
			return pids
		}
	}
	t.Fatalf("helper never reported its formation: %v", sc.Err())
	return nil
}

// alive: a process with pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// requireOneMonitorSession: reads of the states share one connection to
// the monitor, the same backend from one read to the next.
func requireOneMonitorSession(t *testing.T, ctx context.Context, f *formation.Formation) {
	t.Helper()
	conn, err := pgx.Connect(ctx, formation.MonitorAdminURL(f))
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	backend := func() (n, pid int) {
		require.NoError(t, conn.QueryRow(ctx,
			`SELECT count(*), coalesce(min(pid), 0) FROM pg_stat_activity WHERE application_name = $1`,
			formation.SessionApplication).Scan(&n, &pid))
		return n, pid
	}
	n, first := backend()
	require.Equal(t, 1, n, "one session backend on the monitor")
	for range 3 {
		_, err := f.States(ctx)
		require.NoError(t, err)
	}
	n, pid := backend()
	require.Equal(t, 1, n, "one session backend on the monitor")
	require.Equal(t, first, pid, "the same backend serves every read")
}
