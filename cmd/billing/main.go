// Command billing is the one binary of the billing system: migrations, the
// web process, the worker process, the embedded dev environment and the
// operator tools. See `billing --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fibe-dev/billing/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Traces go to the OTLP endpoint of the OTEL_* environment, if any.
	shutdownTraces, err := telemetry.Setup(ctx, "billing")
	if err == nil {
		err = newRootCmd().ExecuteContext(ctx)
	}
	stop()
	flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if terr := shutdownTraces(flushCtx); terr != nil {
		fmt.Fprintln(os.Stderr, "billing: flush traces:", terr)
	}
	cancel()
	if err != nil {
		var ex exitError
		if errors.As(err, &ex) {
			os.Exit(ex.code)
		}
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(1)
	}
}

// exitError ends the process with a code after the command printed its own report.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
