package formation

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
)

// PgCtl runs pg_ctl on n's data directory as the user PostgreSQL runs as,
// its output appended to n's log, as the keeper's is: for a test that
// works on a node's PostgreSQL behind its keeper's back.
func PgCtl(ctx context.Context, f *Formation, n *Node, args ...string) error {
	w, err := f.logFile(n.Name)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(f.pgbin, "pg_ctl"), append([]string{"--pgdata", n.dir}, args...)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = f.env, w, w
	if f.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pg_ctl %v: %w", args, err)
	}
	return nil
}

// DivergedSinceLastLook is Node.divergedSinceLastLook.
func DivergedSinceLastLook(n *Node) bool { return n.divergedSinceLastLook() }

// NewNodeForLog is a node of a formation that is never started, whose
// log is dir/name.log.
func NewNodeForLog(dir, name string) *Node {
	f := &Formation{opts: Options{Dir: dir}}
	return f.newNode(name, 0)
}

// WriteStandbySignal writes n's standby.signal as the formation does.
func WriteStandbySignal(f *Formation, n *Node) error {
	return f.writeFile(filepath.Join(n.dir, "standby.signal"), nil)
}

// PgRewind is Formation.pgRewind: n rewound from source, its keeper left
// as it is.
func PgRewind(ctx context.Context, f *Formation, n, source *Node) error {
	states, err := f.States(ctx)
	if err != nil {
		return err
	}
	for _, s := range states {
		if s.Name == n.Name {
			return f.pgRewind(ctx, n, s.ID, source)
		}
	}
	return fmt.Errorf("no node %s on the monitor", n.Name)
}

// MonitorAdminURL is the monitor's URL for its superuser.
func MonitorAdminURL(f *Formation) string { return f.monitorAdminURL() }

// SessionApplication is the application_name of the formation's monitor
// session.
const SessionApplication = sessionApplication
