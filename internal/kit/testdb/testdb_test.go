package testdb_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestTxRollsBack: a Tx's writes are gone once its test ends, and a
// concurrent Tx never sees them.
func TestTxRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var id int64
	t.Run("writes", func(t *testing.T) {
		tx := testdb.Tx(t)
		require.NoError(t, tx.QueryRow(ctx, `INSERT INTO players (name) VALUES ('rolled back') RETURNING id`).Scan(&id))
		other := testdb.Tx(t)
		var n int
		require.NoError(t, other.QueryRow(ctx, `SELECT count(*) FROM players WHERE id = $1`, id).Scan(&n))
		require.Zero(t, n, "another test's Tx sees no uncommitted row")
	})
	tx := testdb.Tx(t)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM players WHERE id = $1`, id).Scan(&n))
	require.Zero(t, n, "the row is gone with its test")
}

// TestHelperJoin is run by TestBinariesShareOneCluster as a test binary of
// a run: it prints the server it joined, clones a database and takes a Tx,
// then, when asked to, waits to be killed.
func TestHelperJoin(t *testing.T) {
	mode := os.Getenv("TESTDB_HELPER")
	if mode == "" {
		t.Skip("run by TestBinariesShareOneCluster")
	}
	url := testdb.NewURL(t)
	testdb.Tx(t)
	fmt.Printf("joined %s\n", strings.Split(url, "/")[2])
	if mode == "hang" {
		time.Sleep(10 * time.Minute)
	}
}

// TestBinariesShareOneCluster: binaries of one run join one cluster, even
// at once; a binary killed while it uses it does not stop it; and it stops,
// its directory gone, soon after the run's owner and its last binary end.
func TestBinariesShareOneCluster(t *testing.T) {
	if os.Getenv("BILLING_TEST_DATABASE_URL") != "" {
		t.Skip("the tests use an existing server")
	}
	t.Parallel()
	owner := exec.Command("sleep", "600")
	require.NoError(t, owner.Start())
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	dir, err := testdb.RunDirOf(owner.Process.Pid)
	require.NoError(t, err)

	hung := startHelper(t, owner.Process.Pid, "hang")
	servers := map[string]bool{hung.server(t): true}
	done := make(chan string, 2)
	for range 2 {
		h := startHelper(t, owner.Process.Pid, "once")
		go func() { done <- <-h.joined; _ = h.cmd.Wait() }()
	}
	for range 2 {
		select {
		case s := <-done:
			require.NotEmpty(t, s, "a helper binary ended without joining")
			servers[s] = true
		case <-time.After(3 * time.Minute):
			t.Fatal("the helper binaries did not join within 3 minutes")
		}
	}
	require.Len(t, servers, 1, "every binary of the run joined the same server: %v", servers)
	require.NoError(t, hung.cmd.Process.Kill())
	_ = hung.cmd.Wait()
	require.DirExists(t, dir, "the run's owner lives: its cluster stays up")

	require.NoError(t, owner.Process.Kill())
	_ = owner.Wait()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		require.True(t, time.Now().Before(deadline), "%s still there a minute after the run ended", dir)
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := exec.Command("pgrep", "-af", "postgres.*"+dir).Output()
	require.Empty(t, strings.TrimSpace(string(out)), "no postgres left running for %s", dir)
}

type helper struct {
	cmd    *exec.Cmd
	joined chan string // the server it joined; "" if it ended first
}

// startHelper starts this test binary as TestHelperJoin, in the run of
// owner.
func startHelper(t *testing.T, owner int, mode string) *helper {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^TestHelperJoin$", "-test.count=1", "-test.v")
	c.Env = append(os.Environ(), "TESTDB_HELPER="+mode, fmt.Sprintf("%s=%d", testdb.RunOwnerEnv, owner))
	c.Stderr = os.Stderr
	stdout, err := c.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	t.Cleanup(func() { _ = c.Process.Kill() })
	h := &helper{cmd: c, joined: make(chan string, 1)}
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if server, ok := strings.CutPrefix(lines.Text(), "joined "); ok {
				h.joined <- server
				return
			}
		}
		h.joined <- ""
	}()
	return h
}

func (h *helper) server(t *testing.T) string {
	t.Helper()
	select {
	case s := <-h.joined:
		require.NotEmpty(t, s, "the helper binary ended without joining")
		return s
	case <-time.After(3 * time.Minute):
		t.Fatal("the helper binary did not join within 3 minutes")
		return ""
	}
}

// TestFuzzOnlyJoinsNoCluster: a binary run only to fuzz (-test.fuzz with
// -test.run=^$, as scripts/fuzz-short runs it) neither starts nor joins a
// cluster, so it may fuzz beside a suite at the lowest priority.
func TestFuzzOnlyJoinsNoCluster(t *testing.T) {
	t.Parallel()
	if os.Getenv("BILLING_TEST_DATABASE_URL") != "" {
		t.Skip("an external server: no run directory to look for")
	}
	owner := exec.Command("sleep", "600")
	require.NoError(t, owner.Start())
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })

	// Bounded: a binary that did start a cluster would be slow, not hung,
	// but no wait here goes without a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "-test.fuzz=^FuzzNoTarget$", "-test.fuzzcachedir="+t.TempDir())
	c.Env = append(os.Environ(), fmt.Sprintf("%s=%d", testdb.RunOwnerEnv, owner.Process.Pid))
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%s", out)
	dir, err := testdb.RunDirOf(owner.Process.Pid)
	require.NoError(t, err)
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "the fuzz-only binary made the run directory %s:\n%s", dir, out)
}
