// Command billing-lab measures and attacks billing from outside: the load
// generators with their same-run baselines (`billing-lab bench <name>`) and
// the whole system as real processes under faults (`billing-lab chaos`).
// It lives in the lab module so that the service's binary links none of
// it; the processes it starts are the service's own `billing` binary,
// named by --billing or built from the repository for the run.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		var ex exitError
		if errors.As(err, &ex) {
			os.Exit(ex.code)
		}
		fmt.Fprintln(os.Stderr, "billing-lab:", err)
		os.Exit(1)
	}
}

// exitError ends the process with a code after the command printed its own report.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
