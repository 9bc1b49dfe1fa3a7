package pglocal_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/pglocal"
	"github.com/fibe-dev/billing/internal/kit/proctest"
)

// TestRestartReusesData proves the dev cluster keeps its data across starts
// and leaves no process behind.
func TestRestartReusesData(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "starts clusters of its own")
	dir := t.TempDir()
	ctx := context.Background()

	srv, err := pglocal.Start(pglocal.Options{Dir: dir, Fast: true})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, srv.Stop())

	srv, err = pglocal.Start(pglocal.Options{Dir: dir, Fast: true})
	require.NoError(t, err)
	conn, err = pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	require.Equal(t, 42, v)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, srv.Stop())

	out, _ := exec.Command("pgrep", "-af", "postgres.*"+dir).Output()
	require.Empty(t, strings.TrimSpace(string(out)), "no postgres left running for %s", dir)
}

// TestStopRemovesTheTempLog: embedded-postgres logs each start's output
// to a file of its own in the temp directory and never removes it; Stop
// does, so no start leaves one behind.
func TestStopRemovesTheTempLog(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "starts a cluster of its own")
	srv, err := pglocal.Start(pglocal.Options{Dir: t.TempDir(), Fast: true})
	require.NoError(t, err)
	log := pglocal.TempLog(srv)
	require.NotEmpty(t, log, "the postmaster's standard output names the log file")
	require.FileExists(t, log)
	require.NoError(t, srv.Stop())
	require.NoFileExists(t, log)
}

// TestRestartCutsConnections proves Restart really bounces the server and
// that a pool reconnects by itself afterwards.
func TestRestartCutsConnections(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "starts clusters of its own")
	ctx := context.Background()
	srv, err := pglocal.Start(pglocal.Options{Dir: t.TempDir(), Fast: true})
	require.NoError(t, err)
	defer srv.Stop()
	conn, err := pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	var before int
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&before))
	require.NoError(t, srv.Restart())
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err, "the old session is gone")
	conn2, err := pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	defer conn2.Close(ctx)
	var one int
	require.NoError(t, conn2.QueryRow(ctx, "SELECT 1").Scan(&one))
}

// TestClusterDiesWithItsStarter: a cluster never outlives the process that
// started it. A helper process (this test binary, re-run) starts an
// ephemeral cluster and then dies as a red test run does: SIGKILL, a panic
// (what -test.timeout does), Ctrl-C reaching its process group, SIGTERM.
// Within seconds the postmaster is gone and the directory removed.
func TestClusterDiesWithItsStarter(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "starts clusters of its own")
	for _, end := range []string{"sigkill", "panic", "interrupt", "sigterm"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "cluster")
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartCluster$", "-test.v")
			cmd.Env = append(os.Environ(), "PGLOCAL_HELPER_DIR="+dir, "PGLOCAL_HELPER_END="+end)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			port, pid, log := readReady(t, out)
			require.True(t, alive(pid), "postmaster %d runs while its starter lives", pid)
			require.FileExists(t, log)

			switch end {
			case "sigkill":
				require.NoError(t, cmd.Process.Kill())
			case "interrupt": // what Ctrl-C in a terminal does: the whole group
				require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
			case "sigterm":
				require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			}
			_, _ = io.Copy(io.Discard, out)
			require.Error(t, cmd.Wait(), "the starter died")
			died := time.Now()
			require.Eventually(t, func() bool { return !alive(pid) }, time.Minute, 50*time.Millisecond,
				"postmaster %d outlived its starter", pid)
			t.Logf("%s: postmaster gone %v after its starter", end, time.Since(died).Round(time.Millisecond))
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
			if err == nil {
				conn.Close()
			}
			require.Error(t, err, "nothing listens on the cluster's port")
			require.Eventually(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) },
				10*time.Second, 50*time.Millisecond, "the ephemeral directory is removed")
			require.NoFileExists(t, log, "the start's temporary log file is removed")
		})
	}
}

// TestSecondStartTouchesNothing: a Start on a directory whose cluster is
// running is refused at once with ErrInUse, and the running cluster keeps
// serving (a failed start once ran pg_ctl stop on the other's data).
func TestSecondStartTouchesNothing(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "starts clusters of its own")
	ctx := context.Background()
	dir := t.TempDir()
	srv, err := pglocal.Start(pglocal.Options{Dir: dir, Fast: true})
	require.NoError(t, err)
	defer srv.Stop()
	began := time.Now()
	_, err = pglocal.Start(pglocal.Options{Dir: dir, Fast: true})
	require.ErrorIs(t, err, pglocal.ErrInUse)
	require.Less(t, time.Since(began), 10*time.Second, "refused without waiting for the live cluster")
	time.Sleep(2 * time.Second) // what a stray watchdog would need to stop it
	conn, err := pgx.Connect(ctx, srv.URL())
	require.NoError(t, err, "the first cluster still serves")
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.NoError(t, conn.Close(ctx))
}

// TestStartAfterAKilledStarter: the next Start on the directory of a
// starter killed with SIGKILL waits for its watchdog to stop the orphaned
// postmaster, then starts on the same data.
func TestStartAfterAKilledStarter(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "starts clusters of its own")
	dir := filepath.Join(t.TempDir(), "cluster")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartCluster$", "-test.v")
	cmd.Env = append(os.Environ(), "PGLOCAL_HELPER_DIR="+dir, "PGLOCAL_HELPER_END=sigkill", "PGLOCAL_HELPER_KEEP=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	_, pid, _ := readReady(t, out)
	require.NoError(t, cmd.Process.Kill())
	_, _ = io.Copy(io.Discard, out)
	_ = cmd.Wait()

	srv, err := pglocal.Start(pglocal.Options{Dir: dir, Fast: true})
	require.NoError(t, err)
	defer srv.Stop()
	require.False(t, alive(pid), "the orphan %d was stopped before the new start", pid)
	conn, err := pgx.Connect(context.Background(), srv.URL())
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))

	// The dead starter's watchdog stopped its own postmaster only: the new
	// one, in the same directory, outlives the watchdog's longest wait.
	pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	next, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	require.NoError(t, err)
	require.NotEqual(t, pid, next)
	time.Sleep(3 * time.Second)
	require.True(t, alive(next), "the new postmaster %d was stopped by the old starter's watchdog", next)
	conn, err = pgx.Connect(context.Background(), srv.URL())
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))
}

// TestHelperStartCluster is the helper process of TestClusterDiesWithItsStarter.
func TestHelperStartCluster(t *testing.T) {
	dir := os.Getenv("PGLOCAL_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process of TestClusterDiesWithItsStarter")
	}
	srv, err := pglocal.Start(pglocal.Options{Dir: dir, Fast: true, Ephemeral: os.Getenv("PGLOCAL_HELPER_KEEP") == ""})
	require.NoError(t, err)
	pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	fmt.Printf("ready %d %s %s\n", srv.Port(), strings.SplitN(string(pidFile), "\n", 2)[0], pglocal.TempLog(srv))
	if os.Getenv("PGLOCAL_HELPER_END") == "panic" {
		// As -test.timeout does: a panic on another goroutine, no cleanup.
		go panic("test timed out after 10m0s")
	}
	time.Sleep(time.Minute) // until killed
}

// readReady reads the helper's report: its cluster's port, postmaster
// and temporary log file.
func readReady(t *testing.T, r io.Reader) (port, pid int, log string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "ready %d %d %s", &port, &pid, &log); err == nil {
			return port, pid, log
		}
	}
	t.Fatalf("helper never reported its cluster: %v", sc.Err())
	return 0, 0, ""
}

// alive: a process with pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}
