package pglocal

import (
	"path/filepath"

	"github.com/fibe-dev/billing/internal/procs"
)

// watchdogScript is the cluster's procs.Watchdog: on its first line it
// exits if that is "stopped" (a clean Stop); otherwise (EOF: the starter
// died) it stops the cluster and, for a throwaway cluster, removes its
// directory. It stops until no postmaster.pid stays behind. $1 pg_ctl,
// $2 data directory, $3 directory to remove ("" keeps it).
const watchdogScript = `IFS= read -r word
[ "$word" = stopped ] && exit 0
for i in 1 2 3 4 5 6 7 8 9 10; do
  "$1" stop -m fast -w -t 20 -D "$2" >/dev/null 2>&1 || "$1" stop -m immediate -w -D "$2" >/dev/null 2>&1
  [ -f "$2/postmaster.pid" ] || { sleep 1; [ -f "$2/postmaster.pid" ] || break; }
done
[ -n "$3" ] && rm -rf "$3"
exit 0`

// startWatchdog starts the watchdog for the cluster in dataDir.
func startWatchdog(pgctl, dataDir, removeDir string) (*procs.Watchdog, error) {
	return procs.StartWatchdog(watchdogScript, "pglocal-watchdog", pgctl, dataDir, removeDir)
}

// pgctlPath is the pg_ctl the watchdog runs (the root wrapper when root).
func pgctlPath(binaries string) string { return filepath.Join(binaries, "bin", "pg_ctl") }
