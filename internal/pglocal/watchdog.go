package pglocal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// watchdogScript waits for its stdin to end. Stdin is a pipe whose only
// writer is the process that starts the cluster, so it ends when that
// process stops writing: "stopped" after a clean Stop (nothing to do), or
// EOF when the process died any way at all (SIGKILL, a test timeout's
// panic, a signal), and then the script stops the cluster and, for a
// throwaway cluster, removes its directory. It starts before the cluster
// does, so a starter that dies while PostgreSQL is still coming up is
// covered too: it stops until no postmaster.pid stays behind. $1 pg_ctl,
// $2 data directory, $3 directory to remove ("" keeps it).
const watchdogScript = `IFS= read -r word
[ "$word" = stopped ] && exit 0
for i in 1 2 3 4 5 6 7 8 9 10; do
  "$1" stop -m fast -w -t 20 -D "$2" >/dev/null 2>&1 || "$1" stop -m immediate -w -D "$2" >/dev/null 2>&1
  [ -f "$2/postmaster.pid" ] || { sleep 1; [ -f "$2/postmaster.pid" ] || break; }
done
[ -n "$3" ] && rm -rf "$3"
exit 0`

// watchdog is the process that stops the cluster if its starter dies.
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // write end; held only by this process (close-on-exec)
	done chan error
}

// startWatchdog starts the watchdog for the cluster in dataDir. The
// watchdog runs in its own session, so the Ctrl-C that kills `go test` and
// its test binaries (one process group) does not kill it too. The pipe's
// write end is close-on-exec, so no other child keeps it open.
func startWatchdog(pgctl, dataDir, removeDir string) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pglocal: watchdog pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "pglocal-watchdog", pgctl, dataDir, removeDir)
	cmd.Stdin = r
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("pglocal: start watchdog: %w", err)
	}
	wd := &watchdog{cmd: cmd, pipe: w, done: make(chan error, 1)}
	go func() { wd.done <- cmd.Wait() }()
	return wd, nil
}

// finish ends the watchdog and waits (bounded) for it to exit. After a
// clean stop it has nothing to do; otherwise it stops the cluster itself,
// falling back to an immediate shutdown.
func (wd *watchdog) finish(stopped bool) {
	if stopped {
		_, _ = wd.pipe.WriteString("stopped\n")
	}
	_ = wd.pipe.Close()
	select {
	case <-wd.done:
	case <-time.After(45 * time.Second):
		_ = wd.cmd.Process.Kill()
		<-wd.done
	}
}

// pgctlPath is the pg_ctl the watchdog runs (the root wrapper when root).
func pgctlPath(binaries string) string { return filepath.Join(binaries, "bin", "pg_ctl") }
