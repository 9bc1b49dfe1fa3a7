package procs_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/procs"
)

// state is a process's state letter from /proc ("" once it is gone).
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// TestSignalTree: a process in a group of its own, with a child that left
// the group for a session of its own (as PostgreSQL's server processes
// do), is frozen, thawed and killed as one machine.
func TestSignalTree(t *testing.T) {
	t.Parallel()
	out := &procs.TailBuffer{}
	p := sh("machine", `setsid sleep 600 & echo started; while :; do sleep 0.05; done`, out)
	p.OwnGroup(nil)
	require.NoError(t, p.Start())
	t.Cleanup(func() { _ = p.KillTree() })
	var child int
	require.Eventually(t, func() bool {
		for _, d := range procs.Descendants(p.Pid()) {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(d) + "/cmdline"); strings.HasPrefix(string(b), "sleep\x00600") {
				child = d
			}
		}
		return child != 0
	}, time.Minute, 10*time.Millisecond)
	pgid, err := syscall.Getpgid(p.Pid())
	require.NoError(t, err)
	require.Equal(t, p.Pid(), pgid, "the process leads a group of its own")
	childGroup, err := syscall.Getpgid(child)
	require.NoError(t, err)
	require.NotEqual(t, pgid, childGroup, "the child left the group")

	require.NoError(t, p.SignalTree(syscall.SIGSTOP))
	require.Eventually(t, func() bool { return state(p.Pid()) == "T" && state(child) == "T" }, time.Minute, 10*time.Millisecond)
	require.NoError(t, p.SignalTree(syscall.SIGCONT))
	require.Eventually(t, func() bool { return state(p.Pid()) != "T" && state(child) != "T" }, time.Minute, 10*time.Millisecond)

	require.NoError(t, p.KillTree())
	require.False(t, p.Running())
	require.Eventually(t, func() bool { s := state(child); return s == "" || s == "Z" }, time.Minute, 10*time.Millisecond,
		"the child outside the group died with it")
}

// TestWatchdogTell: the script receives what it is told, and cleans up
// when its starter stops writing without saying it stopped.
func TestWatchdogTell(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mark := dir + "/cleaned"
	wd, err := procs.StartWatchdog(`got=""; while IFS= read -r l; do [ "$l" = stopped ] && exit 0; got="$got $l"; done; echo "$got" > "$1"`,
		"test-watchdog", mark)
	require.NoError(t, err)
	require.NoError(t, wd.Tell("a"))
	require.NoError(t, wd.Tell("b"))
	wd.Finish(false)
	b, err := os.ReadFile(mark)
	require.NoError(t, err)
	require.Equal(t, " a b\n", string(b))
	require.Error(t, wd.Tell("late"))

	wd, err = procs.StartWatchdog(`while IFS= read -r l; do [ "$l" = stopped ] && exit 0; done; touch "$1"`, "test-watchdog", dir+"/clean-stop")
	require.NoError(t, err)
	wd.Finish(true)
	_, err = os.Stat(dir + "/clean-stop")
	require.True(t, os.IsNotExist(err), "a clean stop leaves nothing to do")
}
