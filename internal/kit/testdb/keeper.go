package testdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fibe-dev/billing/internal/dev/pglocal"
)

// keeperOwnerEnv tells the keeper its run's owner, "pid:start".
const keeperOwnerEnv = "BILLING_TESTDB_KEEPER_OWNER"

// sharedMaxConnections is the run cluster's max_connections: several
// binaries at once, each with tests that race many connections.
const sharedMaxConnections = 1000

// keep runs the keeper of the run directory dir (see shared.go) and
// returns the process's exit code.
func keep(dir string) int {
	o, err := parseOwner(os.Getenv(keeperOwnerEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testdb keeper:", err)
		return 1
	}
	users, err := os.OpenFile(filepath.Join(dir, "users.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testdb keeper:", err)
		return 1
	}
	srv, err := pglocal.Start(pglocal.Options{Dir: filepath.Join(dir, fmt.Sprintf("pg-%d", os.Getpid())),
		Fast: true, Ephemeral: true, MaxConnections: sharedMaxConnections})
	if err != nil {
		fmt.Fprintln(os.Stderr, "testdb keeper:", err)
		return 1
	}
	if err := writeState(dir, clusterState{Keeper: os.Getpid(), Port: srv.Port()}); err != nil {
		fmt.Fprintln(os.Stderr, "testdb keeper:", err)
		_ = srv.Stop()
		return 1
	}
	watch(dir, o, users)
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testdb keeper: stop:", err)
	}
	// Still holding start.lock: a binary waiting on it finds the file gone
	// from its path and starts afresh.
	_ = os.RemoveAll(dir)
	return 0
}

// watch returns once the cluster may stop, holding start.lock and
// users.lock exclusively, so that no binary uses or joins it any more.
func watch(dir string, o owner, users *os.File) {
	lastUsed := time.Now()
	for ; ; time.Sleep(250 * time.Millisecond) {
		if !tryLock(users) {
			lastUsed = time.Now()
			continue
		}
		unlock(users)
		if o.alive() && time.Since(lastUsed) < idleStop {
			continue
		}
		start, err := os.OpenFile(filepath.Join(dir, "start.lock"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return // the directory is gone: nobody can join
		}
		if tryLock(start) {
			if tryLock(users) {
				return // both stay held until this process exits
			}
			unlock(start)
		}
		start.Close()
		lastUsed = time.Now()
	}
}

// tryLock takes f exclusively without waiting.
func tryLock(f *os.File) bool {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	return !errors.Is(err, syscall.EWOULDBLOCK) && err == nil
}

func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

func parseOwner(v string) (owner, error) {
	pid, start, ok := strings.Cut(v, ":")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil {
		return owner{}, fmt.Errorf("%s=%q is not pid:start", keeperOwnerEnv, v)
	}
	return owner{pid: n, start: start}, nil
}

// writeState writes state.json whole (a rename), so a reader never sees
// half of it.
func writeState(dir string, st clusterState) error {
	b, _ := json.Marshal(st) // two ints
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}
