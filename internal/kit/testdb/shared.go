package testdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// One cluster per test run. The test binaries of one `go test` run are the
// children of one go command (scripts/test names itself instead, through
// RunOwnerEnv, so that the lab module's run shares the service's cluster).
// That process is the run's owner; its pid and start time name the run's
// directory. Files in it:
//
//	start.lock  flock(2), exclusive: one binary at a time joins or starts
//	            the cluster; the keeper takes it to stop the cluster
//	users.lock  flock(2), shared, held by every binary using the cluster
//	            for its whole life (the kernel drops it when one dies)
//	state.json  the keeper's pid and the cluster's port, once it is up
//	keeper.log  the keeper's output
//
// The first binary to join starts the keeper: this same test binary run
// again with KeeperEnv set, in a session of its own and with no pipe to the
// go command. The keeper starts the cluster (pglocal, whose watchdog stops
// the cluster should the keeper itself die), then checks every quarter
// second: once no binary holds users.lock and either the owner has exited
// or no binary has used the cluster for idleStop, it stops the cluster and
// removes the directory. So a run's cluster stops within a second of its
// last binary's end once `go test` has exited, whether those binaries
// ended or died.

// RunOwnerEnv names the process whose run a test binary belongs to (a
// pid); unset, it is the binary's parent, the go command.
const RunOwnerEnv = "BILLING_TEST_RUN_OWNER"

// keeperEnv makes testdb.Main run the keeper of the run directory it
// names instead of the tests.
const keeperEnv = "BILLING_TESTDB_KEEPER"

// idleStop stops a cluster nobody used for that long even though its
// owner lives (a binary run by hand, whose parent is a long-lived shell).
const idleStop = time.Minute

// joinWait bounds how long a binary waits to join: another binary may be
// starting the cluster (pglocal allows it a minute) on a loaded machine.
const joinWait = 3 * time.Minute

// clusterState is what the keeper writes once the cluster is up.
type clusterState struct {
	Keeper int `json:"keeper"`
	Port   int `json:"port"`
}

// owner is the run's owning process: its pid and its start time (in clock
// ticks since boot, from /proc), so a reused pid is not taken for it.
type owner struct {
	pid   int
	start string
}

func runOwner() (owner, error) {
	pid := os.Getppid()
	if v := os.Getenv(RunOwnerEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return owner{}, fmt.Errorf("%s=%q is not a pid", RunOwnerEnv, v)
		}
		pid = n
	}
	start, err := startTime(pid)
	if err != nil {
		return owner{}, fmt.Errorf("the run's owner (pid %d): %w", pid, err)
	}
	return owner{pid: pid, start: start}, nil
}

// startTime is field 22 of /proc/pid/stat: when the process started.
func startTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return fields[19], nil
}

func (o owner) alive() bool {
	s, err := startTime(o.pid)
	return err == nil && s == o.start
}

func (o owner) runDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("billing-testrun-%d-%d-%s", os.Geteuid(), o.pid, o.start))
}

// flockWait takes lock how on f, polling until deadline.
func flockWait(f *os.File, how int, deadline time.Time) error {
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still locked after %v", f.Name(), joinWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockStart takes dir's start.lock, creating dir. A keeper removes the
// directory while it holds the lock: a lock taken on a file that is no
// longer at its path is dropped and taken again on the new one.
func lockStart(dir string, deadline time.Time) (*os.File, error) {
	for {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "start.lock")
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := flockWait(f, syscall.LOCK_EX, deadline); err != nil {
			f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close()
	}
}

// joinRun joins (starting it if need be) the run's cluster, runs prepare
// on its port while no other binary joins, and returns a release that
// leaves it.
func joinRun(prepare func(port int) error) (release func(), err error) {
	o, err := runOwner()
	if err != nil {
		return nil, err
	}
	dir := o.runDir()
	deadline := time.Now().Add(joinWait)
	start, err := lockStart(dir, deadline)
	if err != nil {
		return nil, err
	}
	defer start.Close() // drops the lock
	st, err := readState(dir)
	if err != nil || !isKeeper(st.Keeper, dir) || !listening(st.Port) {
		if err == nil && isKeeper(st.Keeper, dir) {
			_ = syscall.Kill(st.Keeper, syscall.SIGKILL) // up, its cluster not: its watchdog cleans up
		}
		if st, err = startKeeper(dir, o, deadline); err != nil {
			_ = os.RemoveAll(dir) // holding start.lock: leave no litter
			return nil, err
		}
	}
	users, err := os.OpenFile(filepath.Join(dir, "users.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil {
		err = flockWait(users, syscall.LOCK_SH, deadline)
	}
	if err != nil {
		return nil, fmt.Errorf("join the run's cluster: %w", err)
	}
	if err := prepare(st.Port); err != nil {
		users.Close()
		return nil, err
	}
	return func() { users.Close() }, nil
}

func readState(dir string) (clusterState, error) {
	var st clusterState
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	return st, err
}

// isKeeper tells whether pid is the live keeper of dir (not a process
// that reused a dead keeper's pid).
func isKeeper(pid int, dir string) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return pid > 0 && err == nil && slices.Contains(strings.Split(string(env), "\x00"), keeperEnv+"="+dir)
}

// listening tells a live cluster from a keeper's pid reused by another
// process.
func listening(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// startKeeper starts the keeper of dir and waits for its cluster; the
// caller holds start.lock.
func startKeeper(dir string, o owner, deadline time.Time) (clusterState, error) {
	_ = os.Remove(filepath.Join(dir, "state.json"))
	exe, err := os.Executable()
	if err != nil {
		return clusterState{}, err
	}
	logPath := filepath.Join(dir, "keeper.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return clusterState{}, err
	}
	defer logf.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), keeperEnv+"="+dir,
		fmt.Sprintf("%s=%d:%s", keeperOwnerEnv, o.pid, o.start))
	// No pipe to the go command, which would wait for it, and a session
	// of its own, so that a Ctrl-C meant for a binary does not reach it.
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return clusterState{}, fmt.Errorf("start the keeper: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		if st, err := readState(dir); err == nil && st.Keeper == cmd.Process.Pid {
			return st, nil
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			return clusterState{}, fmt.Errorf("the keeper exited (%v): %s", err, out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return clusterState{}, fmt.Errorf("the keeper's cluster not up after %v", joinWait)
		}
	}
}
