package formation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Timeouts are how fast the formation notices a lost node and replaces a
// lost primary: the monitor's health checks (pgautofailover.* settings)
// and the keepers' network partition timeout.
type Timeouts struct {
	HealthCheckPeriod     time.Duration // pgautofailover.health_check_period
	HealthCheckTimeout    time.Duration // pgautofailover.health_check_timeout (connect timeout)
	HealthCheckMaxRetries int           // pgautofailover.health_check_max_retries
	HealthCheckRetryDelay time.Duration // pgautofailover.health_check_retry_delay
	NodeUnhealthy         time.Duration // pgautofailover.node_considered_unhealthy_timeout
	PrimaryDemote         time.Duration // pgautofailover.primary_demote_timeout
	// NetworkPartition is the keepers' timeout.network_partition_timeout:
	// a primary that reaches neither the monitor nor any standby for this
	// long stops itself. PrimaryDemote must exceed it, so that a primary
	// cut off from the others is down before a standby is promoted.
	NetworkPartition time.Duration
}

// DefaultTimeouts are pg_auto_failover's own (2.0): a lost primary is
// replaced about a minute after it dies.
var DefaultTimeouts = Timeouts{
	HealthCheckPeriod: 5 * time.Second, HealthCheckTimeout: 5 * time.Second, HealthCheckMaxRetries: 2,
	HealthCheckRetryDelay: 2 * time.Second, NodeUnhealthy: 20 * time.Second, PrimaryDemote: 30 * time.Second,
	NetworkPartition: 20 * time.Second,
}

// TestTimeouts replace a lost primary in about ten seconds, for tests and
// local trials. They keep the order that matters (PrimaryDemote above
// NetworkPartition) and leave health checks room for a loaded 2-core
// machine: a connect that takes more than two seconds, twice in a row,
// would be a false failover.
var TestTimeouts = Timeouts{
	HealthCheckPeriod: time.Second, HealthCheckTimeout: 2 * time.Second, HealthCheckMaxRetries: 2,
	HealthCheckRetryDelay: 500 * time.Millisecond, NodeUnhealthy: 3 * time.Second, PrimaryDemote: 6 * time.Second,
	NetworkPartition: 4 * time.Second,
}

// applyToMonitor sets the monitor's settings (ALTER SYSTEM, reload).
func (t Timeouts) applyToMonitor(ctx context.Context, adminURL string) error {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	return execAll(ctx, adminURL,
		fmt.Sprintf(`ALTER SYSTEM SET pgautofailover.health_check_period = %d`, ms(t.HealthCheckPeriod)),
		fmt.Sprintf(`ALTER SYSTEM SET pgautofailover.health_check_timeout = %d`, ms(t.HealthCheckTimeout)),
		fmt.Sprintf(`ALTER SYSTEM SET pgautofailover.health_check_max_retries = %d`, t.HealthCheckMaxRetries),
		fmt.Sprintf(`ALTER SYSTEM SET pgautofailover.health_check_retry_delay = %d`, ms(t.HealthCheckRetryDelay)),
		fmt.Sprintf(`ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = %d`, ms(t.NodeUnhealthy)),
		fmt.Sprintf(`ALTER SYSTEM SET pgautofailover.primary_demote_timeout = %d`, ms(t.PrimaryDemote)))
}

// State is one data node as the monitor sees it.
type State struct {
	Name     string
	ID       int // the monitor's node id, which names the node's replication slot
	Port     int
	Reported string // the state the keeper last reported (primary, secondary, ...)
	Goal     string // the state the monitor assigned
	Healthy  bool
}

func (s State) String() string {
	return fmt.Sprintf("%s %s/%s healthy=%t", s.Name, s.Reported, s.Goal, s.Healthy)
}

// States is the monitor's view of the data nodes, by name. Every read
// shares one connection to the monitor (see monitorSession).
func (f *Formation) States(ctx context.Context) ([]State, error) {
	return f.session.states(ctx, f.MonitorURL())
}

func readStates(ctx context.Context, conn *pgx.Conn) ([]State, error) {
	rows, err := conn.Query(ctx, `SELECT nodename, nodeid, nodeport, reportedstate::text, goalstate::text, health = 1
		FROM pgautofailover.node WHERE formationid = 'default' ORDER BY nodename`)
	if err != nil {
		return nil, fmt.Errorf("formation: monitor: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (State, error) {
		var s State
		err := r.Scan(&s.Name, &s.ID, &s.Port, &s.Reported, &s.Goal, &s.Healthy)
		return s, err
	})
}

// Node returns the data node called name.
func (f *Formation) Node(name string) *Node {
	for _, n := range f.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Primary is the node the monitor has as primary (reported and assigned),
// nil when there is none right now (a failover in progress).
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	states, err := f.States(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range states {
		if s.Reported == "primary" && s.Goal == "primary" {
			return f.Node(s.Name), nil
		}
	}
	return nil, nil
}

// Standbys are the data nodes the monitor has as secondaries.
func (f *Formation) Standbys(ctx context.Context) ([]*Node, error) {
	states, err := f.States(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Node
	for _, s := range states {
		if s.Reported == "secondary" && s.Goal == "secondary" {
			out = append(out, f.Node(s.Name))
		}
	}
	return out, nil
}

// WaitPrimary waits for a node other than old (nil: any) that the monitor
// has put in charge of writes, and returns it: reported and assigned
// primary, or wait_primary, where it takes writes before a standby has
// caught up with it (on a busy machine the other standby's restart to
// follow it can take minutes; WaitHealthy waits for that).
func (f *Formation) WaitPrimary(ctx context.Context, old *Node) (*Node, error) {
	var found *Node
	err := f.waitState(ctx, "a new primary", func(states []State) bool {
		for _, s := range states {
			if s.Reported == s.Goal && (s.Goal == "primary" || s.Goal == "wait_primary") && (old == nil || s.Name != old.Name) {
				found = f.Node(s.Name)
				return true
			}
		}
		return false
	})
	return found, err
}

// WaitHealthy waits until every data node is back in service: one
// primary, the others its secondaries (a Single formation's node running
// alone). Meanwhile it runs CHECKPOINT on the primary every second: a
// standby's base backup, and pg_rewind of a former primary, wait for the
// primary's next checkpoint, which would otherwise come only with
// checkpoint_timeout. And it rewinds a node
// whose PostgreSQL cannot start as a standby because its history
// diverged from the primary's (rewind.go), which pg_auto_failover leaves
// retrying for ever.
func (f *Formation) WaitHealthy(ctx context.Context) error {
	return f.waitState(ctx, "one primary and the others its secondaries", func(states []State) bool {
		primaries, secondaries := 0, 0
		for _, s := range states {
			switch {
			case s.Reported == "primary" && s.Goal == "primary",
				f.opts.Single && s.Reported == "single" && s.Goal == "single":
				primaries++
			case s.Reported == "secondary" && s.Goal == "secondary":
				secondaries++
			}
		}
		if primaries == 1 && secondaries == len(f.nodes)-1 && len(states) == len(f.nodes) {
			return true
		}
		f.checkpoint(ctx, states)
		f.healDiverged(ctx, states)
		return false
	})
}

// checkpoint runs CHECKPOINT on whichever node reports itself primary
// (or runs alone), at most once a second.
func (f *Formation) checkpoint(ctx context.Context, states []State) {
	f.mu.Lock()
	if time.Since(f.lastCheckpoint) < time.Second {
		f.mu.Unlock()
		return
	}
	f.lastCheckpoint = time.Now()
	f.mu.Unlock()
	for _, s := range states {
		if !slices.Contains([]string{"primary", "wait_primary", "single"}, s.Reported) {
			continue
		}
		if n := f.Node(s.Name); n != nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = execAll(cctx, n.AdminURL(), `CHECKPOINT`)
			cancel()
		}
	}
}

// waitState polls the monitor every 250 ms until done holds; what names
// the wait in the error, which carries the last states seen.
func (f *Formation) waitState(ctx context.Context, what string, done func([]State) bool) error {
	var last []State
	var lastErr error
	for {
		// Each poll bounded, so a monitor that stopped answering shows up
		// as an error in the wait's report rather than stalling it.
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		states, err := f.States(pctx)
		cancel()
		if err == nil {
			last = states
			if done(states) {
				return nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			var desc []string
			for _, s := range last {
				desc = append(desc, s.String())
			}
			return fmt.Errorf("formation: waiting for %s: %w (last states: %s; last error: %v; %s; logs in %s)",
				what, ctx.Err(), strings.Join(desc, ", "), lastErr, f.diagnosis(context.WithoutCancel(ctx), last), f.opts.Dir)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// monitorSession is the one connection to the monitor that every read of
// the nodes' states shares, opened on first use and again after an error.
// A connection costs the monitor a backend and a SCRAM exchange, and the
// states are read while the machine is at its busiest (waiting on a
// failover, or every half second in billing dev --ha): a new one per read
// would add to the load that slows the failover being waited for.
type monitorSession struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

// sessionApplication is the application_name of the session's connection,
// for finding it in the monitor's pg_stat_activity.
const sessionApplication = "billing formation"

// states reads the states. A connection that fails is closed and the
// read tried once on a new one: the monitor may have restarted since the
// last read.
func (m *monitorSession) states(ctx context.Context, url string) ([]State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	reused := m.conn != nil
	states, err := m.read(ctx, url)
	if err != nil && reused && ctx.Err() == nil {
		states, err = m.read(ctx, url)
	}
	return states, err
}

func (m *monitorSession) read(ctx context.Context, url string) ([]State, error) {
	if m.conn == nil {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, fmt.Errorf("formation: monitor: %w", err)
		}
		cfg.RuntimeParams["application_name"] = sessionApplication
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("formation: monitor: %w", err)
		}
		m.conn = c
	}
	states, err := readStates(ctx, m.conn)
	if err != nil {
		m.close()
	}
	return states, err
}

// close closes the connection; the caller holds mu.
func (m *monitorSession) close() {
	if m.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.conn.Close(ctx)
		m.conn = nil
	}
}

// Close closes the connection, for a formation that stops.
func (m *monitorSession) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.close()
}

// watchdogScript is the formation's procs.Watchdog. Each node's launch
// tells it "group <pid>"; on "stopped" it exits; on EOF (the starter died)
// it stops each group, then SIGKILLs it with every descendant of its
// leader (PostgreSQL's server processes leave the group), and removes $1
// when set.
const watchdogScript = `groups=""
while IFS= read -r l; do
  case "$l" in
    stopped) exit 0 ;;
    "group "*) groups="$groups ${l#group }" ;;
  esac
done
tree() {
  all=$1; frontier=$1
  while [ -n "$frontier" ]; do
    next=""
    for s in /proc/[0-9]*/stat; do
      read -r pid rest < "$s" 2>/dev/null || continue
      ppid=${rest##*) }; ppid=${ppid#* }; ppid=${ppid%% *}
      for p in $frontier; do [ "$ppid" = "$p" ] && next="$next $pid"; done
    done
    all="$all $next"; frontier=$next
  done
  echo $all
}
for g in $groups; do
  kill -STOP -"$g" 2>/dev/null || continue
  kill -KILL -"$g" $(tree "$g") 2>/dev/null
done
[ -n "$1" ] && rm -rf "$1"
exit 0`

// primaryStates are the states of a node that takes writes, or is about
// to.
var primaryStates = []string{"single", "wait_primary", "primary", "prepare_promotion", "stop_replication"}

// Replaced reports whether the monitor has dealt with the loss of n: it
// no longer assigns n a primary's state and another node is primary
// (reported and assigned). A lost node started before that could come
// back as the primary the monitor still has on record, against the
// failover under way; `billing dev --ha` waits for this before it brings
// a node back.
func (f *Formation) Replaced(ctx context.Context, n *Node) (bool, error) {
	states, err := f.States(ctx)
	if err != nil {
		return false, err
	}
	return ReplacedIn(states, n), nil
}

// ReplacedIn is Replaced read from states the caller already has (one
// snapshot of the monitor, so what it printed and what it decided agree).
func ReplacedIn(states []State, n *Node) bool {
	other := false
	for _, s := range states {
		switch {
		case s.Name == n.Name && slices.Contains(primaryStates, s.Goal):
			return false
		case s.Name != n.Name && s.Reported == s.Goal && (s.Goal == "primary" || s.Goal == "wait_primary"):
			other = true
		}
	}
	return other
}

// diagnosis says, for a wait that timed out, which keepers are not
// running, the monitor's last events (what each node reported and was
// told, and why) and the end of the keeper's and PostgreSQL's logs of each
// node whose keeper had not reached the state it was told (in states, the
// last seen): what an operator reads first when a formation is stuck, and
// all a CI run keeps.
func (f *Formation) diagnosis(ctx context.Context, states []State) string {
	var b strings.Builder
	for _, n := range f.nodes {
		if !n.Running() {
			fmt.Fprintf(&b, "keeper of %s not running; ", n.Name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if events, err := f.Events(ctx, 30); err != nil {
		fmt.Fprintf(&b, "monitor events: %v", err)
	} else {
		b.WriteString("monitor's last events:")
		for _, e := range events {
			b.WriteString("\n  " + e)
		}
	}
	for _, s := range states {
		if n := f.Node(s.Name); n != nil && s.Reported != s.Goal {
			fmt.Fprintf(&b, "\n%s (%s, told %s), the end of its log:", s.Name, s.Reported, s.Goal)
			for _, l := range n.logTail(logTailLines) {
				b.WriteString("\n  " + l)
			}
			if tail := n.postgresLogTail(logTailLines); len(tail) > 0 {
				fmt.Fprintf(&b, "\n%s, the end of its PostgreSQL's log:", s.Name)
				for _, l := range tail {
					b.WriteString("\n  " + l)
				}
			}
		}
	}
	return b.String()
}

// logTailLines is how much of a stuck node's log a diagnosis carries.
const logTailLines = 15

// Events are the monitor's last n events (pgautofailover.event), oldest
// first, each one line: time, node, reported and goal state, description.
func (f *Formation) Events(ctx context.Context, n int) ([]string, error) {
	conn, err := pgx.Connect(ctx, f.monitorAdminURL())
	if err != nil {
		return nil, fmt.Errorf("formation: monitor: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT to_char(eventtime, 'HH24:MI:SS.MS') || ' ' || nodename || ' ' ||
			reportedstate::text || '/' || goalstate::text || ': ' || description
		FROM (SELECT * FROM pgautofailover.event ORDER BY eventid DESC LIMIT $1) e ORDER BY eventid`, n)
	if err != nil {
		return nil, fmt.Errorf("formation: monitor events: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
