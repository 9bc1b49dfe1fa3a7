package pglocal

import "github.com/fibe-dev/billing/internal/dev/procs"

// watchdogScript is the cluster's procs.Watchdog. It reads lines until
// EOF: "pid N" names the postmaster it guards (told once it is up);
// "log PATH" the temporary log file of that start (tempLog); "stopped" (a
// clean Stop) ends it with nothing to do. EOF means the starter died: it
// stops that postmaster, fast then immediate, removes the log file and,
// for a throwaway cluster, its directory. It signals only the postmaster
// it guards, and only while the data directory's postmaster.pid still
// names it: once that one is gone, the next starter may already run its
// own cluster in the same directory, which must be left alone. A starter
// that died before telling the pid leaves the one postmaster.pid names.
// $1 data directory, $2 directory to remove ("" keeps it).
const watchdogScript = `data=$1 remove=$2 pid= log=
while IFS= read -r word; do
  case "$word" in
    stopped) exit 0 ;;
    "pid "*) pid=${word#pid } ;;
    "log "*) log=${word#log } ;;
  esac
done
[ -n "$pid" ] || { sleep 1; pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null); }
ours() { [ -n "$pid" ] && [ "$(head -n 1 "$data/postmaster.pid" 2>/dev/null)" = "$pid" ] && kill -0 "$pid" 2>/dev/null; }
for sig in INT QUIT; do
  ours || break
  kill -s "$sig" "$pid" 2>/dev/null
  i=0
  while ours && [ "$i" -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
done
[ -n "$log" ] && rm -f "$log"
[ -n "$remove" ] && rm -rf "$remove"
exit 0`

// startWatchdog starts the watchdog for the cluster in dataDir.
func startWatchdog(dataDir, removeDir string) (*procs.Watchdog, error) {
	return procs.StartWatchdog(watchdogScript, "pglocal-watchdog", dataDir, removeDir)
}
