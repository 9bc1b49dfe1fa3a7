// Package instancelock lets one process at a time own a directory: a
// second `billing dev` on the same directory, or a second cluster started
// on the same data, is refused instead of stepping on the first.
//
// The lock is flock(2) on a file in the directory. The kernel drops it when
// the process exits however it exits (a crash, SIGKILL), so a dead owner
// never blocks the next one and nothing needs cleaning up. The file also
// holds who owns it (pid and, once known, an address), so that the refusal
// can name the running instance.
package instancelock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Holder is what the lock file says about its owner.
type Holder struct {
	PID int `json:"pid"`
	// Addr is where the owner serves (an API URL), "" until it says.
	Addr string `json:"addr,omitempty"`
}

// HeldError is the refusal of Acquire: another live process owns the lock.
// Holder is what its file said (zero values when it had not written yet).
type HeldError struct {
	Path   string
	Holder Holder
}

func (e *HeldError) Error() string {
	switch {
	case e.Holder.PID == 0:
		return fmt.Sprintf("%s is held by another process", e.Path)
	case e.Holder.Addr == "":
		return fmt.Sprintf("%s is held by pid %d", e.Path, e.Holder.PID)
	}
	return fmt.Sprintf("%s is held by pid %d (%s)", e.Path, e.Holder.PID, e.Holder.Addr)
}

// Lock is a held lock. Release it, or exit.
type Lock struct {
	f      *os.File
	holder Holder
}

// holderWait bounds how long a refused Acquire waits for the owner to
// write its address: the owner takes the lock, then binds its listener
// and records it, a few milliseconds later.
const holderWait = 3 * time.Second

// Acquire takes the lock at path (creating the file) without waiting, and
// records this process's pid in it. A lock held by a live process is a
// *HeldError naming that process.
func Acquire(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("instancelock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &HeldError{Path: path, Holder: readHolder(path, holderWait)}
		}
		return nil, fmt.Errorf("instancelock: lock %s: %w", path, err)
	}
	l := &Lock{f: f}
	if err := l.Record(Holder{PID: os.Getpid()}); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// Record rewrites what the lock file says about its owner.
func (l *Lock) Record(h Holder) error {
	b, _ := json.Marshal(h) // cannot fail: an int and a string
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("instancelock: %w", err)
	}
	if _, err := l.f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("instancelock: %w", err)
	}
	l.holder = h
	return nil
}

// SetAddr records the owner's address beside its pid.
func (l *Lock) SetAddr(addr string) error {
	h := l.holder
	h.Addr = addr
	return l.Record(h)
}

// Release drops the lock. The file stays: removing it would let a third
// process lock a new file while a second still waits on the old one.
func (l *Lock) Release() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
}

// readHolder reads the owner's record, waiting up to wait for one that
// names an address (an owner that has just taken the lock has not written
// it yet). What it has at the end is returned, possibly empty.
func readHolder(path string, wait time.Duration) Holder {
	deadline := time.Now().Add(wait)
	for {
		var h Holder
		b, err := os.ReadFile(path)
		if err == nil {
			_ = json.Unmarshal(b, &h)
		}
		if h.Addr != "" || time.Now().After(deadline) {
			return h
		}
		time.Sleep(20 * time.Millisecond)
	}
}
