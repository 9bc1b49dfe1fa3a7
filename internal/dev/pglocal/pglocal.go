// Package pglocal runs a private PostgreSQL cluster from the machine's own
// binaries, for `billing dev` and for tests.
//
// It wraps embedded-postgres with BinariesPath pointed at the local
// installation, so nothing is downloaded. PostgreSQL refuses to run as root,
// and CI runs as root: in that case the cluster runs as the `postgres` system
// user through tiny wrapper scripts that `runuser` the real binaries, which
// keeps the whole thing transparent to callers.
//
// A cluster never outlives the process that started it: a watchdog process
// (see watchdog.go) stops it when that process dies without calling Stop.
package pglocal

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"

	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/platform/instancelock"
)

// ErrInUse means another live process runs a cluster on the directory:
// Start refuses and touches nothing of it.
var ErrInUse = errors.New("pglocal: the directory is in use")

// ErrNoBinaries means no PostgreSQL server binaries were found on this machine.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found (looked at `pg_config --bindir` and /usr/lib/postgresql/*/bin); " +
	"install them with `apt-get install -y postgresql`, or set BILLING_DATABASE_URL to an existing server")

// Options configure a cluster.
type Options struct {
	// Dir holds the cluster: data/ (kept across starts) and run/ (wiped).
	Dir string
	// Port to listen on (localhost); 0 picks a free one.
	Port int
	// PortFallback picks a free port instead when Port is taken by another
	// program (a port kept from an earlier start); without it a taken Port
	// is an error.
	PortFallback bool
	// Database created on first start; default "billing".
	Database string
	// Fast trades durability for speed (fsync off): for throwaway test clusters.
	Fast bool
	// MaxConnections is the server's max_connections; 0 is 400.
	MaxConnections int
	// Log receives PostgreSQL's output; nil discards it.
	Log io.Writer
	// Ephemeral marks Dir as scratch: should this process die without
	// calling Stop, the watchdog removes Dir after stopping the cluster.
	Ephemeral bool
}

// Server is a running cluster.
type Server struct {
	pg       *embeddedpostgres.EmbeddedPostgres
	port     int
	db       string
	binaries string // directory holding bin/pg_ctl (the root wrappers when root)
	dataDir  string
	watchdog *procs.Watchdog
	lock     *instancelock.Lock
	tempLog  string // embedded-postgres's log file of this start, removed by Stop
}

// FindBinaries returns the directory that contains bin/pg_ctl.
func FindBinaries() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, filepath.Dir(strings.TrimSpace(string(out))))
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	sort.Slice(matches, func(i, j int) bool { return majorOf(matches[i]) > majorOf(matches[j]) })
	for _, m := range matches {
		candidates = append(candidates, filepath.Dir(filepath.Dir(m)))
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, "bin", "pg_ctl")); err == nil {
			if _, err := os.Stat(filepath.Join(c, "bin", "initdb")); err == nil {
				return c, nil
			}
		}
	}
	return "", ErrNoBinaries
}

func majorOf(pgctl string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(pgctl))))
	return n
}

// Start starts (or restarts on its existing data) the cluster in opts.Dir.
func Start(opts Options) (*Server, error) {
	binaries, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	version, err := serverVersion(binaries)
	if err != nil {
		return nil, err
	}
	if opts.Database == "" {
		opts.Database = "billing"
	}
	if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	lock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	if opts.Port, err = choosePort(opts.Port, opts.PortFallback); err == nil {
		err = lock.SetAddr(fmt.Sprintf("127.0.0.1:%d", opts.Port))
	}
	if err != nil {
		lock.Release()
		return nil, err
	}
	s, err := start(opts, binaries, version)
	if err != nil {
		lock.Release()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// lockDir makes this process the only one starting or running a cluster
// in dir, and waits (bounded) for the postmaster of a starter that died to
// be stopped by its watchdog. It never stops anything itself: a cluster in
// use by another process is ErrInUse.
func lockDir(dir string) (*instancelock.Lock, error) {
	lock, err := instancelock.Acquire(filepath.Join(dir, "pglocal.lock"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInUse, err)
	}
	if err := waitOrphan(filepath.Join(dir, "data"), orphanWait); err != nil {
		lock.Release()
		return nil, err
	}
	return lock, nil
}

// choosePort is port when it is free (0: any free port); a taken one is an
// error, or with fallback a free one instead. The check is advisory (the
// port may be taken again before PostgreSQL binds it) but turns the usual
// case into one clear line.
func choosePort(port int, fallback bool) (int, error) {
	if port != 0 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			ln.Close()
			return port, nil
		}
		if !fallback {
			return 0, fmt.Errorf("pglocal: port %d is taken: %w", port, err)
		}
	}
	return procs.FreePort()
}

// orphanWait bounds the wait for a dead starter's postmaster: its watchdog
// stops it within seconds (a fast shutdown, then an immediate one).
const orphanWait = 45 * time.Second

// waitOrphan returns once no live postmaster is recorded in dataDir's
// postmaster.pid. A pid file whose process is gone, or is not a postgres
// (its pid reused after a crash), is stale: PostgreSQL itself replaces it.
func waitOrphan(dataDir string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		pid := livePostmaster(dataDir)
		if pid == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: a PostgreSQL (pid %d) still runs on %s", ErrInUse, pid, dataDir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// livePostmaster is the pid of the live postgres postmaster.pid names, or 0.
func livePostmaster(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
		return 0
	}
	return pid
}

// start starts the cluster; the caller holds the directory's lock.
func start(opts Options, binaries string, version embeddedpostgres.PostgresVersion) (*Server, error) {
	var err error
	if os.Geteuid() == 0 {
		if binaries, err = rootWrappers(opts.Dir, binaries); err != nil {
			return nil, err
		}
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = 400
	}
	params := map[string]string{"unix_socket_directories": "", "max_connections": strconv.Itoa(opts.MaxConnections)}
	if opts.Fast {
		params["fsync"] = "off"
		params["synchronous_commit"] = "off"
		params["full_page_writes"] = "off"
	}
	logw := opts.Log
	if logw == nil {
		logw = io.Discard
	}
	cfg := embeddedpostgres.DefaultConfig().
		Version(version).
		Port(uint32(opts.Port)).
		Database(opts.Database).
		Username("billing").Password("billing").
		BinariesPath(binaries).
		RuntimePath(filepath.Join(opts.Dir, "run")).
		DataPath(filepath.Join(opts.Dir, "data")).
		CachePath(filepath.Join(opts.Dir, "cache")).
		StartParameters(params).
		StartTimeout(60 * time.Second).
		Logger(logw)
	s := &Server{pg: embeddedpostgres.NewDatabase(cfg), port: opts.Port, db: opts.Database, binaries: binaries,
		dataDir: filepath.Join(opts.Dir, "data")}
	// The watchdog comes first: a cluster never outlives the process that
	// started it, even one killed with SIGKILL (or by a test timeout's
	// panic) while PostgreSQL was still starting, so a red run never leaks
	// servers into the next.
	if s.watchdog, err = startWatchdog(s.dataDir, ephemeralDir(opts)); err != nil {
		return nil, err
	}
	if err := s.pg.Start(); err != nil {
		s.watchdog.Finish(false)
		return nil, fmt.Errorf("pglocal: start PostgreSQL in %s: %w", opts.Dir, err)
	}
	if pid := livePostmaster(s.dataDir); pid != 0 {
		// The watchdog stops this postmaster only, never the one a later
		// starter runs in the same directory.
		_ = s.watchdog.Tell(fmt.Sprintf("pid %d", pid))
		if s.tempLog = tempLog(pid); s.tempLog != "" {
			_ = s.watchdog.Tell("log " + s.tempLog)
		}
	}
	return s, nil
}

// tempLog is the file embedded-postgres copies the server's output from:
// it creates one in the temp directory on every start and never removes
// it, so that every start would leave one behind. The postmaster writes
// to it as its standard output, which names it; "" if that is not such a
// file. Stop removes it, or the watchdog when the starter died.
func tempLog(pid int) string {
	name, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", pid))
	if err != nil || filepath.Dir(name) != filepath.Clean(os.TempDir()) ||
		!strings.HasPrefix(filepath.Base(name), "embedded_postgres_log") {
		return ""
	}
	return name
}

// ephemeralDir is the directory the watchdog removes, "" for none.
func ephemeralDir(opts Options) string {
	if opts.Ephemeral {
		return opts.Dir
	}
	return ""
}

// URL is the connection URL of the cluster's database.
func (s *Server) URL() string { return s.DatabaseURL(s.db) }

// DatabaseURL is the connection URL of another database on the cluster.
func (s *Server) DatabaseURL(db string) string {
	return fmt.Sprintf("postgres://billing:billing@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// Port is the TCP port the cluster listens on.
func (s *Server) Port() int { return s.port }

// Stop shuts the cluster down (fast mode) and waits for it.
func (s *Server) Stop() error {
	err := s.pg.Stop() // copies the rest of the log file to Options.Log first
	s.watchdog.Finish(err == nil)
	s.lock.Release()
	if s.tempLog != "" {
		_ = os.Remove(s.tempLog)
	}
	return err
}

// Restart is `pg_ctl restart -m fast`: every connection is cut, as in a
// failover or a crash-restart of the primary. Fault-injection tests use it.
func (s *Server) Restart() error {
	// The new postmaster inherits pg_ctl's stdout: give it a file, not a
	// pipe, or waiting for the pipe to close would wait for the server.
	logPath := filepath.Join(filepath.Dir(s.dataDir), "restart.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(s.binaries, "bin", "pg_ctl"), "restart", "-m", "fast", "-w", "-D", s.dataDir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("pglocal: pg_ctl restart: %w\n%s", err, out)
	}
	return nil
}

func serverVersion(binaries string) (embeddedpostgres.PostgresVersion, error) {
	out, err := exec.Command(filepath.Join(binaries, "bin", "pg_ctl"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("pglocal: pg_ctl --version: %w", err)
	}
	// "pg_ctl (PostgreSQL) 15.18 (Debian ...)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return "", fmt.Errorf("pglocal: unexpected pg_ctl --version output %q", out)
	}
	major := strings.SplitN(fields[2], ".", 2)[0]
	// embedded-postgres compares only the major version with PG_VERSION.
	return embeddedpostgres.PostgresVersion(major + ".0.0"), nil
}

// rootWrappers writes bin/{initdb,pg_ctl,postgres} scripts that run the real
// binaries as the postgres user, and hands dir to that user: initdb must be
// able to create data/ and read the password file embedded-postgres writes
// into run/ as root.
func rootWrappers(dir, binaries string) (string, error) {
	cred, err := ForPostgres(dir)
	if err != nil {
		return "", err
	}
	uid, gid := cred.Uid, cred.Gid
	wrapDir := filepath.Join(dir, "pgbin")
	if err := os.MkdirAll(filepath.Join(wrapDir, "bin"), 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		pre := ""
		if name == "initdb" {
			pre = fmt.Sprintf("chown -R %d:%d %q\n", uid, gid, filepath.Join(dir, "run"))
		}
		script := fmt.Sprintf("#!/bin/sh\n%sexec runuser -u postgres -- %q \"$@\"\n", pre, filepath.Join(binaries, "bin", name))
		if err := os.WriteFile(filepath.Join(wrapDir, "bin", name), []byte(script), 0o755); err != nil {
			return "", err
		}
	}
	return wrapDir, nil
}

// ForPostgres prepares dir for PostgreSQL's programs, which refuse to run
// as root: when this process is root, it hands dir (but a pgbin/ inside)
// to the `postgres` system user, makes every directory above it
// traversable by that user, and returns the credential to run those
// programs with. Not root, it does nothing and returns nil.
func ForPostgres(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pglocal: running as root needs the `postgres` system user (apt-get install -y postgresql): %w", err)
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	if err := chownTree(dir, uid, gid); err != nil {
		return nil, err
	}
	if err := parentsTraversable(dir); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.Name() == "pgbin" && info.IsDir() {
			return filepath.SkipDir
		}
		return os.Lchown(path, uid, gid)
	})
}

// parentsTraversable makes sure the postgres user can reach dir: a temp dir
// made by os.MkdirTemp is 0700 and owned by root.
func parentsTraversable(dir string) error {
	for p := filepath.Dir(dir); p != "/" && p != "."; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, info.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("pglocal: make %s traversable for postgres: %w", p, err)
			}
		}
	}
	return nil
}
