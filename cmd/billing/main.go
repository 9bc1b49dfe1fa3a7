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
	"strings"
	"syscall"
	"time"

	"github.com/fibe-dev/billing/internal/platform/safetext"
	"github.com/fibe-dev/billing/internal/platform/telemetry"
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
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(1)
	}
}

// errorLine is the one line a failed command prints: the program's name,
// once (an error that already starts with it, "billing dev is already
// running", is not prefixed again), then the error on one line.
func errorLine(err error) string {
	msg := oneLine(err.Error())
	if strings.HasPrefix(msg, "billing ") || strings.HasPrefix(msg, "billing:") {
		return msg
	}
	return "billing: " + msg
}

// oneLine puts an error on the one line a failed command prints: an error
// of several lines (pgx lists each connection attempt, often the same one
// twice) becomes its distinct lines joined with "; ". An error may quote
// what a provider or an API caller sent, so the line is escaped (package
// safetext) like every text output.
func oneLine(msg string) string {
	var out strings.Builder
	seen := map[string]bool{}
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		switch {
		case out.Len() == 0:
		case strings.HasSuffix(out.String(), ":"):
			out.WriteString(" ")
		default:
			out.WriteString("; ")
		}
		out.WriteString(l)
	}
	return safetext.Escape(out.String())
}

// exitError ends the process with a code after the command printed its own report.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
