package procs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// OwnGroup makes the next Start put the process in a session and process
// group of its own (setsid), so that a signal to the group reaches it and
// every child that stays in the group but nothing else, and neither a
// terminal's Ctrl-C nor its parent's group signals reach it. With cred it
// runs as that user (as root, for a program that refuses root).
func (p *Proc) OwnGroup(cred *syscall.Credential) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
}

// SignalTree sends sig to the process's group and to every descendant of
// the process, including those that left its group (PostgreSQL's server
// processes each start a session of their own): a machine that stops or
// dies stops every process on it at once. The whole tree is stopped
// (SIGSTOP) first, so that none forks or dies (its children would be
// handed to init, out of reach) while it is gathered; then each gets sig,
// and, unless sig is SIGSTOP or SIGKILL, SIGCONT to act on it. It reads
// /proc, so it is Linux only. A process that is not running is left alone.
func (p *Proc) SignalTree(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, running := p.cmd, p.runningLocked()
	p.mu.Unlock()
	if !running {
		return nil
	}
	pid := cmd.Process.Pid
	tree, err := freezeTree(pid)
	if err != nil {
		return fmt.Errorf("procs: %s: %w", p.Name, err)
	}
	if sig == syscall.SIGSTOP {
		return nil
	}
	_ = syscall.Kill(-pid, sig)
	for _, d := range tree {
		_ = syscall.Kill(d, sig)
	}
	if sig != syscall.SIGKILL {
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		for _, d := range tree {
			_ = syscall.Kill(d, syscall.SIGCONT)
		}
	}
	return nil
}

// freezeTree stops pid's group, then pid's descendants until no new one
// appears, and returns pid and them.
func freezeTree(pid int) ([]int, error) {
	_ = syscall.Kill(-pid, syscall.SIGSTOP)
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	seen := map[int]bool{pid: true}
	tree := []int{pid}
	for range 20 {
		fresh := 0
		for _, d := range Descendants(pid) {
			if !seen[d] {
				seen[d] = true
				tree = append(tree, d)
				fresh++
				_ = syscall.Kill(d, syscall.SIGSTOP)
			}
		}
		if fresh == 0 {
			return tree, nil
		}
	}
	return tree, fmt.Errorf("still forking while being stopped")
}

// KillTree is SignalTree(SIGKILL), then waits (bounded) for the process
// itself to be gone: a machine lost at once.
func (p *Proc) KillTree() error {
	if err := p.SignalTree(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.waitExit(time.Minute) {
		return fmt.Errorf("procs: %s still running a minute after SIGKILL", p.Name)
	}
	return nil
}

// Descendants lists the processes below pid (children, their children,
// ...), from /proc.
func Descendants(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces, never ")".
		s := string(b)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 {
			continue
		}
		child, err1 := strconv.Atoi(strings.TrimSpace(s[:strings.IndexByte(s, ' ')]))
		parent, err2 := strconv.Atoi(fields[1])
		if err1 == nil && err2 == nil {
			children[parent] = append(children[parent], child)
		}
	}
	var out []int
	for frontier := []int{pid}; len(frontier) > 0; {
		var next []int
		for _, p := range frontier {
			next = append(next, children[p]...)
		}
		out = append(out, next...)
		frontier = next
	}
	return out
}
