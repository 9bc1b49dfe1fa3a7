package formation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// divergedSignature is what PostgreSQL logs, and exits on, when it is
// started as a standby of a primary whose timeline forked off its own
// history before the point it has already replayed: it holds WAL the new
// primary never had, and only a rewind (or a new base backup) lets it
// follow.
var divergedSignature = []byte("is not a child of this server's history")

// healDiverged rewinds each data node whose PostgreSQL has refused, since
// the last look, to start as a standby because its history diverged from
// the primary's. pg_auto_failover 2.0 rewinds a former primary on its way
// demoted -> catchingup, but when the monitor sends it through report_lsn
// instead (it does when the new primary is marked unhealthy meanwhile, as
// happens on a starved machine), the keeper follows the new primary
// without a rewind and retries a start that can never succeed. An
// operator's remedy is the runbook's; this is the same remedy, for the
// formations the tests, the lab and `billing dev --ha` run.
func (f *Formation) healDiverged(ctx context.Context, states []State) {
	if !f.heal.TryLock() {
		return // another wait is looking, or rewinding
	}
	defer f.heal.Unlock()
	source := writer(states)
	ids := map[string]int{}
	for _, s := range states {
		ids[s.Name] = s.ID
	}
	for _, n := range f.nodes {
		// A node seen diverged stays so until it is rewound: during a
		// failover there may be no primary to rewind it from yet.
		if n.divergedSinceLastLook() {
			n.diverged = true
		}
		if !n.diverged || source == "" || source == n.Name || time.Since(n.rewindTried) < rewindRetry {
			continue
		}
		n.rewindTried = time.Now()
		if err := f.rewindFrom(ctx, n, ids[n.Name], f.Node(source)); err != nil {
			n.note("formation: rewind of %s failed: %v", n.Name, err)
			continue
		}
		n.diverged = false
		f.rewound = append(f.rewound, n.Name)
	}
}

// rewindRetry paces the attempts on a node whose rewind failed (its
// keeper stays stopped meanwhile), so that a wait polling every 250 ms does
// not run pg_rewind as often; the failure is in the node's log.
const rewindRetry = 10 * time.Second

// writer names the node the monitor has in charge of writes in states
// (reported and assigned primary or wait_primary), "" when none is.
func writer(states []State) string {
	for _, s := range states {
		if s.Reported == s.Goal && (s.Goal == "primary" || s.Goal == "wait_primary") {
			return s.Name
		}
	}
	return ""
}

// Rewound names the nodes the formation has rewound, in order (a node
// rewound twice is named twice).
func (f *Formation) Rewound() []string {
	f.heal.Lock()
	defer f.heal.Unlock()
	return append([]string(nil), f.rewound...)
}

// divergedSinceLastLook reports whether the node's logs have shown the
// diverged signature since the last look: PostgreSQL's own (its logging
// collector writes under the data directory's log/, a file per start)
// and the keeper's, which relays what PostgreSQL wrote to stderr.
func (n *Node) divergedSinceLastLook() bool {
	paths, _ := filepath.Glob(filepath.Join(n.dir, "log", "*"))
	found := false
	for _, p := range append(paths, n.logPath()) {
		if bytes.Contains(n.readNew(p), divergedSignature) {
			found = true
		}
	}
	return found
}

// readNew is what path holds past the last look, whole lines only (the
// last may be half written), and moves the look past them.
func (n *Node) readNew(path string) []byte {
	if n.logSeen == nil {
		n.logSeen = map[string]int64{}
	}
	file, err := os.Open(filepath.Clean(path))
	if err != nil {
		return nil
	}
	defer file.Close()
	if info, err := file.Stat(); err != nil || info.Size() <= n.logSeen[path] {
		return nil
	}
	if _, err := file.Seek(n.logSeen[path], io.SeekStart); err != nil {
		return nil
	}
	b, err := io.ReadAll(file)
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		return nil
	}
	n.logSeen[path] += int64(i + 1)
	return b[:i+1]
}

// rewindFrom makes data node n (the monitor's node id) follow source, the
// primary, again after its history diverged from source's: it stops n's
// keeper (and its PostgreSQL, if running), runs pg_rewind from source, and
// starts the keeper, which then follows source from the rewound data
// directory. Should pg_rewind fail, n is left stopped and the error says
// why. The WAL pg_rewind discards was never acknowledged: under
// synchronous replication a commit is acknowledged only once a standby
// has it, and the monitor promotes the most advanced standby.
func (f *Formation) rewindFrom(ctx context.Context, n *Node, id int, source *Node) error {
	if id <= 0 {
		return fmt.Errorf("formation: rewind %s: the monitor has no id for it", n.Name)
	}
	n.note("formation: %s cannot follow %s (its history diverged); rewinding it", n.Name, source.Name)
	if err := n.stop(syscall.SIGINT, time.Minute); err != nil {
		return err
	}
	if err := f.pgRewind(ctx, n, id, source); err != nil {
		return err
	}
	n.divergedSinceLastLook() // what its failed starts logged is dealt with
	if err := n.launch(); err != nil {
		return err
	}
	n.note("formation: %s rewound to %s's history; its keeper is running again", n.Name, source.Name)
	return nil
}

// pgRewind rewinds n's data directory to source's history and leaves it
// a standby of source.
//
// pg_rewind first replays a data directory that was not shut down
// cleanly in single-user mode, which refuses standby mode, so
// standby.signal goes for the rewind (pg_rewind would remove it anyway:
// the primary has none); it is written again afterwards whatever the
// outcome, so that whatever starts the node next starts it as a standby,
// never as a second primary.
//
// pg_rewind also copies source's configuration over n's and removes what
// source lacks, among it the standby settings (a primary has none). A
// standby started so has no primary to stream from: it replays the WAL
// pg_rewind copied and then waits, never consistent while source kept
// writing during the copy, and its keeper waits on it without end. So n's
// own configuration files are put back, and its standby settings name
// source, as the keeper's own rewind (demoted -> catchingup) leaves them.
func (f *Formation) pgRewind(ctx context.Context, n *Node, id int, source *Node) error {
	// Read before standby.signal goes: a failure here leaves the node as
	// it was, a standby.
	own, err := n.readConfig()
	if err != nil {
		return err
	}
	signal := filepath.Join(n.dir, "standby.signal")
	if err := os.Remove(signal); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("formation: rewind %s: %w", n.Name, err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(f.pgbin, "pg_rewind"), "--target-pgdata", n.dir,
		"--source-server", fmt.Sprintf("host=localhost port=%d user=postgres dbname=postgres", source.Port))
	cmd.Env = f.env
	if f.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	}
	out, runErr := cmd.CombinedOutput()
	n.note("formation: pg_rewind of %s:\n%s", n.Name, bytes.TrimSpace(out))
	own[standbyConf] = standbySettings(id, source.Port)
	confErr := f.writeConfig(n, own)
	signalErr := f.writeFile(signal, nil)
	if runErr != nil {
		return fmt.Errorf("formation: pg_rewind of %s from %s: %w (%s)", n.Name, source.Name, runErr, bytes.TrimSpace(out))
	}
	return errors.Join(confErr, signalErr)
}

// standbyConf is the file pg_auto_failover's keeper keeps a standby's
// settings in (postgresql.conf includes it if it exists).
const standbyConf = "postgresql-auto-failover-standby.conf"

// ownConfig are the files of a data directory that describe the node
// rather than the data, which pg_rewind would replace with the source's.
var ownConfig = []string{"postgresql.auto.conf", "postgresql-auto-failover.conf", "pg_hba.conf"}

// standbySettings are the settings of a standby with the monitor's node
// id that streams from the primary at port, in the keeper's own form: its
// application name and slot are the ones the primary's keeper manages
// and names in synchronous_standby_names.
func standbySettings(id, port int) []byte {
	return []byte(fmt.Sprintf(`# Settings by pg_auto_failover
primary_conninfo = 'application_name=pgautofailover_standby_%[1]d host=localhost port=%[2]d user=pgautofailover_replicator sslmode=prefer'
primary_slot_name = 'pgautofailover_standby_%[1]d'
recovery_target_timeline = 'latest'
`, id, port))
}

// readConfig reads n's own configuration files, by name; a file n lacks
// is left out.
func (n *Node) readConfig() (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, name := range ownConfig {
		b, err := os.ReadFile(filepath.Join(n.dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("formation: %w", err)
		}
		files[name] = b
	}
	return files, nil
}

// writeConfig writes files into n's data directory.
func (f *Formation) writeConfig(n *Node, files map[string][]byte) error {
	var errs []error
	for name, b := range files {
		errs = append(errs, f.writeFile(filepath.Join(n.dir, name), b))
	}
	return errors.Join(errs...)
}

// writeFile writes b to path, owned by the user PostgreSQL runs as.
func (f *Formation) writeFile(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	if f.cred != nil {
		if err := os.Chown(path, int(f.cred.Uid), int(f.cred.Gid)); err != nil {
			return fmt.Errorf("formation: %w", err)
		}
	}
	return nil
}

// note appends a line to the node's log, where the keeper's own account
// is, so that the two read in order.
func (n *Node) note(format string, args ...any) {
	w, err := n.f.logFile(n.Name)
	if err != nil {
		return
	}
	if c, ok := w.(io.Closer); ok {
		defer c.Close()
	}
	fmt.Fprintf(w, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
