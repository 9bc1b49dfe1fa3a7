package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fibe-dev/billing/internal/dev/pglocal"
)

// PgBench runs pgbench with script (pgbench's own script language; use
// \set with random() for keys) at clients connections for d against dbURL,
// and reports its transactions per second and latencies. It is the
// baseline: the same SQL effect without any Go in the path.
func PgBench(ctx context.Context, name, dbURL, script string, clients int, d time.Duration, vars map[string]string) (*Report, error) {
	binaries, err := pglocal.FindBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "billing-pgbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return nil, err
	}
	secs := int(d.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	args := []string{"-n", "-M", "prepared", "-r", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 4)),
		"-T", strconv.Itoa(secs), "-f", file, "--random-seed", "1"}
	for k, v := range vars {
		args = append(args, "-D", k+"="+v)
	}
	conn, options, err := libpqURL(dbURL)
	if err != nil {
		return nil, err
	}
	args = append(args, conn)
	cmd := exec.CommandContext(ctx, filepath.Join(binaries, "bin", "pgbench"), args...)
	cmd.Env = append(os.Environ(), "PGOPTIONS="+options)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	return parsePgBench(name, clients, secs, string(out))
}

var (
	reTPS     = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	reTxns    = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	reLatency = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
	reFailed  = regexp.MustCompile(`number of failed transactions: (\d+)`)
)

func parsePgBench(name string, clients, secs int, out string) (*Report, error) {
	tps := reTPS.FindStringSubmatch(out)
	txns := reTxns.FindStringSubmatch(out)
	if tps == nil || txns == nil {
		return nil, fmt.Errorf("pgbench: unexpected output:\n%s", out)
	}
	r := &Report{Name: name, Clients: clients, Seconds: float64(secs)}
	r.OpsPerSec, _ = strconv.ParseFloat(tps[1], 64)
	r.Ops, _ = strconv.ParseInt(txns[1], 10, 64)
	if m := reLatency.FindStringSubmatch(out); m != nil {
		// pgbench reports the mean, not percentiles; it stands in for p50.
		r.P50ms, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reFailed.FindStringSubmatch(out); m != nil {
		r.Errors, _ = strconv.ParseInt(m[1], 10, 64)
	}
	r.Note("latency", "pgbench mean, reported as p50")
	return r, nil
}

// libpqURL is dbURL as libpq (pgbench) takes it: pgx lets a URL carry any
// run-time setting as a query parameter (the tests' synchronous_commit),
// libpq only its own, so the others move to PGOPTIONS' "-c name=value".
func libpqURL(dbURL string) (conn, options string, err error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", "", fmt.Errorf("pgbench: database URL: %w", err)
	}
	q := u.Query()
	var opts []string
	for k, vs := range q {
		if libpqParams[k] {
			continue
		}
		for _, v := range vs {
			opts = append(opts, "-c "+k+"="+v)
		}
		q.Del(k)
	}
	sort.Strings(opts)
	u.RawQuery = q.Encode()
	return u.String(), strings.Join(opts, " "), nil
}

// libpqParams are the connection parameters libpq itself reads from a URL
// (those billing's URLs use).
var libpqParams = map[string]bool{"sslmode": true, "host": true, "port": true, "user": true, "password": true,
	"dbname": true, "connect_timeout": true, "application_name": true, "target_session_attrs": true,
	"sslrootcert": true, "sslcert": true, "sslkey": true, "options": true}
