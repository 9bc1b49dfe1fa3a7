package instancelock_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/platform/instancelock"
)

// TestSecondAcquireNamesTheHolder: while one lock is held, a second
// Acquire of the same file is refused at once with the holder's pid and
// address; after Release it succeeds.
func TestSecondAcquireNamesTheHolder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dev.lock")
	first, err := instancelock.Acquire(path)
	require.NoError(t, err)
	require.NoError(t, first.SetAddr("http://127.0.0.1:8080"))

	_, err = instancelock.Acquire(path)
	var held *instancelock.HeldError
	require.True(t, errors.As(err, &held), "%v", err)
	require.Equal(t, instancelock.Holder{PID: os.Getpid(), Addr: "http://127.0.0.1:8080"}, held.Holder)
	require.Contains(t, err.Error(), "http://127.0.0.1:8080")

	first.Release()
	again, err := instancelock.Acquire(path)
	require.NoError(t, err)
	again.Release()
}

// TestLockDiesWithItsOwner: a process that took the lock and was killed
// with SIGKILL leaves it free for the next one, with no clean-up.
func TestLockDiesWithItsOwner(t *testing.T) {
	t.Parallel()
	if path := os.Getenv("INSTANCELOCK_CHILD"); path != "" {
		l, err := instancelock.Acquire(path)
		if err != nil {
			os.Exit(3)
		}
		_ = l.SetAddr("child")
		os.Stdout.WriteString("locked\n")
		time.Sleep(time.Minute)
		return
	}
	path := filepath.Join(t.TempDir(), "dev.lock")
	child := exec.Command(os.Args[0], "-test.run=^TestLockDiesWithItsOwner$")
	child.Env = append(os.Environ(), "INSTANCELOCK_CHILD="+path)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)

	_, err = instancelock.Acquire(path)
	var held *instancelock.HeldError
	require.True(t, errors.As(err, &held), "%v", err)
	require.Equal(t, child.Process.Pid, held.Holder.PID)

	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	l, err := instancelock.Acquire(path)
	require.NoError(t, err, "a killed owner's lock is free")
	l.Release()
}
