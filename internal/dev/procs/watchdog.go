package procs

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Watchdog is a shell script that cleans up after this process if it dies
// any way at all (SIGKILL, a test timeout's panic, a signal) without
// saying it stopped cleanly: servers it started, directories it made.
//
// The script reads its stdin, a pipe whose only writer is this process, a
// line at a time: what Tell sends (the script decides what a line means),
// "stopped" after a clean Finish (nothing left to do), or EOF when this
// process died, and then it cleans up. It starts before what it guards,
// so a starter that dies while its servers are still coming up is covered
// too. It runs in a session of its own, so the Ctrl-C that kills `go test`
// and its test binaries (one process group) does not kill it too. The
// pipe's write end is close-on-exec, so no other child keeps it open.
type Watchdog struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	pipe *os.File // write end; held only by this process
	done chan error
}

// StartWatchdog starts script under /bin/sh with args as $1, $2, ...;
// name is its $0 (what ps shows).
func StartWatchdog(script, name string, args ...string) (*Watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("procs: watchdog pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, name}, args...)...)
	cmd.Stdin = r
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("procs: start watchdog: %w", err)
	}
	wd := &Watchdog{cmd: cmd, pipe: w, done: make(chan error, 1)}
	go func() { wd.done <- cmd.Wait() }()
	return wd, nil
}

// Tell sends the script one line.
func (wd *Watchdog) Tell(line string) error {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.pipe == nil {
		return fmt.Errorf("procs: watchdog already finished")
	}
	_, err := wd.pipe.WriteString(line + "\n")
	return err
}

// Finish ends the watchdog and waits (bounded) for it to exit. After a
// clean stop (stopped) it has nothing to do; otherwise it cleans up now,
// as if this process had died.
func (wd *Watchdog) Finish(stopped bool) {
	wd.mu.Lock()
	if wd.pipe != nil {
		if stopped {
			_, _ = wd.pipe.WriteString("stopped\n")
		}
		_ = wd.pipe.Close()
		wd.pipe = nil
	}
	wd.mu.Unlock()
	select {
	case <-wd.done:
	case <-time.After(45 * time.Second):
		_ = wd.cmd.Process.Kill()
		<-wd.done
	}
}
