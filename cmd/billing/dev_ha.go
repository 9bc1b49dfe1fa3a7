package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/dev/formation"
)

// devFormation is what `billing dev --ha` runs on: a pg_auto_failover
// formation (a monitor and three data nodes, a fresh one each run, under
// <dir>/ha, listening on loopback only and asking for passwords) with the
// timeouts lowered so a failover takes seconds, a watcher printing every
// change of a node's state, and a keeper of the nodes that brings a lost
// one back (as a standby) once the monitor has promoted another.
type devFormation struct {
	f      *formation.Formation
	cancel context.CancelFunc
	done   chan struct{}
}

func startDevFormation(ctx context.Context, dir string, out io.Writer) (*devFormation, error) {
	fmt.Fprintf(out, "Starting a pg_auto_failover formation (monitor + 3 data nodes) in %s ...\n", filepath.Join(dir, "ha"))
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f, err := formation.Start(sctx, formation.Options{Dir: filepath.Join(dir, "ha"), Timeouts: formation.TestTimeouts,
		Fast: true, Ephemeral: true})
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	d := &devFormation{f: f, cancel: stop, done: make(chan struct{})}
	go d.watch(wctx, out)
	return d, nil
}

// watch prints each node's state as it changes, and brings back each
// node whose keeper is gone.
func (d *devFormation) watch(ctx context.Context, out io.Writer) {
	defer close(d.done)
	seen := map[string]string{}
	lost := map[string]bool{}
	for ctx.Err() == nil {
		// One snapshot of the monitor: what is printed is what the
		// decision to bring a node back was made on.
		if states, err := d.f.States(ctx); err == nil {
			printStates(out, states, seen)
			d.bringBack(out, states, lost)
		}
		sleepOrDone(ctx, 500*time.Millisecond)
	}
}

// printStates prints the [ha] line of each node whose state changed.
func printStates(out io.Writer, states []formation.State, seen map[string]string) {
	for _, s := range states {
		now := s.Reported + "/" + s.Goal
		if old, ok := seen[s.Name]; ok && old != now {
			fmt.Fprintf(out, "[ha] %s %s: %s -> %s\n", time.Now().Format("15:04:05"), s.Name, old, now)
		}
		seen[s.Name] = now
	}
}

// bringBack starts each lost node again once the monitor has replaced it
// (formation.Replaced), never on a timer: started while the monitor
// still has it as primary, a lost primary could take its place back in
// the middle of the failover.
func (d *devFormation) bringBack(out io.Writer, states []formation.State, lost map[string]bool) {
	for _, n := range d.f.Nodes() {
		if n.Running() {
			delete(lost, n.Name)
			continue
		}
		if !lost[n.Name] {
			lost[n.Name] = true
			fmt.Fprintf(out, "[ha] %s is gone; billing dev brings it back once the monitor has promoted another node\n", n.Name)
		}
		if !formation.ReplacedIn(states, n) {
			continue
		}
		fmt.Fprintf(out, "[ha] %s %s: the monitor has replaced it; bringing it back as a standby\n", time.Now().Format("15:04:05"), n.Name)
		if err := n.Start(); err != nil {
			fmt.Fprintf(out, "[ha] restart %s: %v\n", n.Name, err)
		}
	}
}

func sleepOrDone(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// printHelp says how to lose the primary and what to watch.
func (d *devFormation) printHelp(ctx context.Context, w io.Writer) {
	var lines []string
	primary, _ := d.f.Primary(ctx)
	for _, n := range d.f.Nodes() {
		role := "standby"
		if n == primary {
			role = "primary"
		}
		lines = append(lines, fmt.Sprintf("    kill -KILL -- -%d   # %s (%s, port %d)", n.Pid(), n.Name, role, n.Port))
	}
	fmt.Fprintf(w, `
High availability: billing runs on the formation's multi-host URL (the
primary is whichever node accepts writes). Lose a node's machine (its keeper
and PostgreSQL) with:
%s
and watch: the [ha] lines here show the monitor promote a standby (about
ten seconds; the timeouts are lowered for trying, see docs/deploying.md for
production's), the API and webhooks answer 503 meanwhile and then carry on,
and once the monitor has promoted another node the lost one comes back as a
standby. Keep the curl lines above running while you do it. Every server
listens on loopback only and asks for a password; the nodes' states:
  pg_autoctl show state --monitor %s
Monitor: %s
`, strings.Join(lines, "\n"), shellQuote(d.f.MonitorURL()), redactURL(d.f.MonitorURL()))
}

// startDevHA starts dev's formation, points cfg at it, keeps its
// multi-host URL (credentials included) in <dir>/database.url as plain dev
// does its own, and has the banner say how to lose its primary; stop
// stops it.
func startDevHA(ctx context.Context, cfg *config.Config, dir string, out io.Writer, b *devBanner) (stop func(), err error) {
	d, err := startDevFormation(ctx, dir, out)
	if err != nil {
		return nil, err
	}
	cfg.DatabaseURL = d.f.URL()
	if err := writeDatabaseURL(dir, cfg.DatabaseURL); err != nil {
		_ = d.stop()
		return nil, err
	}
	b.urlFile = filepath.Join(dir, devURLFile)
	b.more = func(w io.Writer) { d.printHelp(ctx, w) }
	return func() { _ = d.stop() }, nil
}

// stop stops the watcher, then the formation (removing it).
func (d *devFormation) stop() error {
	d.cancel()
	<-d.done
	return d.f.Stop()
}
