package formation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// A formation listens on loopback only and asks every connection for a
// password, as billing dev's embedded PostgreSQL does: pg_autoctl's own
// rules use scram-sha-256 (--auth), but initdb's rules above them trust
// every local connection, so the first node and the monitor have them
// rewritten (the standbys copy the first node's). The superuser and
// pg_auto_failover's roles (autoctl_node on the monitor, the replicator
// on the data nodes) share one password made for the formation, kept in a
// password file (mode 0600) that every pg_autoctl and PostgreSQL process
// reads through PGPASSFILE. The monitor's health checks need none: an
// authentication request proves the node up.

// authMethod is the method of every rule of pg_hba.conf.
const authMethod = "scram-sha-256"

// listenAddresses is every server's listen_addresses.
const listenAddresses = "localhost"

// passFile is the password file, under Dir's home.
func (f *Formation) passFile() string { return filepath.Join(f.opts.Dir, "home", ".pgpass") }

// writePassFile makes the formation's secret and writes it, for every
// host, port and database, for the roles pg_autoctl connects as.
func (f *Formation) writePassFile() error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	f.secret = hex.EncodeToString(b)
	var lines string
	for _, role := range []string{"postgres", "autoctl_node", "pgautofailover_replicator"} {
		lines += fmt.Sprintf("*:*:*:%s:%s\n", role, f.secret)
	}
	if err := os.WriteFile(f.passFile(), []byte(lines), 0o600); err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	return nil
}

// trustRule matches a pg_hba.conf rule whose method is trust.
var trustRule = regexp.MustCompile(`(?m)^(\s*(?:local|host)\s.*\s)trust(\s*(?:#.*)?)$`)

// requirePasswords sets the roles' password on the server at adminURL,
// then rewrites every trust rule of dataDir's pg_hba.conf to
// scram-sha-256 and reloads. Either order of the two would let a reload
// in between lock adminURL out; this one cannot.
func (f *Formation) requirePasswords(ctx context.Context, adminURL, dataDir string, roles ...string) error {
	var stmts []string
	for _, role := range roles {
		stmts = append(stmts, fmt.Sprintf(`ALTER ROLE %s PASSWORD '%s'`, role, f.secret))
	}
	if err := execAll(ctx, adminURL, stmts...); err != nil {
		return err
	}
	path := filepath.Join(dataDir, "pg_hba.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	out := trustRule.ReplaceAll(b, []byte("${1}"+authMethod+"${2}"))
	if err := os.WriteFile(path, out, 0o600); err != nil { // an existing file keeps its owner
		return fmt.Errorf("formation: %w", err)
	}
	return execAll(ctx, adminURL) // the reload
}
