package formation

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fibe-dev/billing/internal/dev/procs"
)

// Node is the monitor or a data node: one pg_autoctl keeper with its
// PostgreSQL, in a process group of its own.
type Node struct {
	Name string
	Port int
	f    *Formation
	dir  string

	mu     sync.Mutex
	args   []string // of the next launch
	proc   *procs.Proc
	frozen bool
	// logSeen is how much of each log (the keeper's, PostgreSQL's) WaitHealthy
	// has looked through for a diverged history, by path (rewind.go);
	// guarded by the formation's heal.
	logSeen map[string]int64
	// diverged: the logs showed it, and no rewind has dealt with it yet;
	// rewindTried is when the last rewind began.
	diverged    bool
	rewindTried time.Time
}

func (f *Formation) newNode(name string, port int, args ...string) *Node {
	return &Node{Name: name, Port: port, f: f, dir: f.path(name), args: args}
}

func (n *Node) logPath() string { return n.f.path(n.Name + ".log") }

// launch starts the node's keeper with its next arguments; every launch
// after the first runs the existing node (`pg_autoctl run`).
func (n *Node) launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	logw, err := n.f.logFile(n.Name)
	if err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	p := procs.Isolated(n.Name, n.f.bin, n.f.env, logw, n.args...)
	p.OwnGroup(n.f.cred)
	if err := p.Start(); err != nil {
		return err
	}
	if err := n.f.watchdog.Tell(fmt.Sprintf("group %d", p.Pid())); err != nil {
		_ = p.KillTree()
		return fmt.Errorf("formation: watchdog: %w", err)
	}
	n.proc, n.frozen = p, false
	n.args = []string{"run", "--pgdata", n.dir}
	return nil
}

// Start brings a killed or stopped node back (`pg_autoctl run`): the
// keeper asks the monitor what the node is now, and a former primary
// rejoins as a standby (pg_rewind, or a new base backup).
func (n *Node) Start() error {
	if n.Running() {
		return fmt.Errorf("formation: %s is already running", n.Name)
	}
	return n.launch()
}

// Pid is the node's keeper's process id, which is also its process
// group's (0 before the first start). `kill -KILL -- -<Pid>` from a shell
// loses the node as Kill does, bar the server processes, which follow
// their postmaster.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.Pid()
}

// Running reports whether the node's keeper is alive (frozen or not).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && n.proc.Running()
}

// Kill loses the node's machine at once: SIGKILL to the keeper,
// PostgreSQL and every server process, frozen or not.
func (n *Node) Kill() error {
	n.mu.Lock()
	p := n.proc
	n.frozen = false
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.KillTree()
}

// Freeze stops every process of the node (SIGSTOP): a machine that hangs.
// Its connections stay open and its port still completes TCP handshakes,
// but nothing answers until Thaw.
func (n *Node) Freeze() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return fmt.Errorf("formation: %s never started", n.Name)
	}
	if err := n.proc.SignalTree(syscall.SIGSTOP); err != nil {
		return err
	}
	n.frozen = true
	return nil
}

// Thaw resumes a frozen node (SIGCONT); a node that is not frozen is left
// alone.
func (n *Node) Thaw() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || !n.frozen {
		return nil
	}
	n.frozen = false
	return n.proc.SignalTree(syscall.SIGCONT)
}

// stop sends the keeper sig (SIGINT: fast shutdown, SIGTERM: smart) and
// waits up to d; past d the node is killed, and that is an error.
func (n *Node) stop(sig syscall.Signal, d time.Duration) error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil || !p.Running() {
		return nil
	}
	if err := p.StopWith(sig, d); errors.Is(err, procs.ErrNotStopped) {
		// Its keeper was killed; its PostgreSQL, if any, must go too (its
		// server processes follow the postmaster).
		killPostmaster(n.dir)
		return fmt.Errorf("formation: stop %s: %w", n.Name, err)
	}
	return nil
}

// killPostmaster SIGKILLs the postmaster of dataDir, from its pid file.
func killPostmaster(dataDir string) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if pid, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// URL connects to this node alone as the application's role (it may be a
// read-only standby).
func (n *Node) URL() string {
	return fmt.Sprintf("postgres://%s:%s@localhost:%d/%s?sslmode=disable", AppUser, AppPassword, n.Port, Database)
}

// AdminURL connects to this node alone as the postgres superuser, for
// what a test does behind the application's back (CHECKPOINT, cancelling
// backends).
func (n *Node) AdminURL() string {
	return fmt.Sprintf("postgres://postgres:%s@localhost:%d/%s?sslmode=disable", n.f.secret, n.Port, Database)
}

// DataDir is the node's PostgreSQL data directory.
func (n *Node) DataDir() string { return n.dir }

// Log is the tail of the node's log, for a failure's message.
func (n *Node) Log(max int) string {
	b, _ := os.ReadFile(filepath.Clean(n.logPath()))
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// logTail is the last count lines of the node's log (Log's last 64 KiB),
// for a diagnosis; nil when there is no log yet.
func (n *Node) logTail(count int) []string {
	return lastLines(n.Log(64<<10), count)
}

// postgresLogTail is the last count lines of what the node's PostgreSQL
// logged last (its logging collector starts a file under the data
// directory's log/ at each start, named by the time): what a start that
// never becomes ready says, which the keeper's log does not.
func (n *Node) postgresLogTail(count int) []string {
	paths, _ := filepath.Glob(filepath.Join(n.dir, "log", "*"))
	if len(paths) == 0 {
		return nil
	}
	slices.Sort(paths)
	b, _ := os.ReadFile(filepath.Clean(paths[len(paths)-1]))
	return lastLines(string(b[max(len(b)-64<<10, 0):]), count)
}

// lastLines is text's last count lines; nil when text is empty.
func lastLines(text string, count int) []string {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return nil
	}
	lines := strings.Split(text, "\n")
	return lines[max(len(lines)-count, 0):]
}
