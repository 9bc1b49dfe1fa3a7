package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/platform/safetext"
)

// withPool loads the configuration, opens a small pool and runs f: the
// plumbing of every short operator command.
func withPool(cmd *cobra.Command, f func(context.Context, *pgxpool.Pool, *config.Config) error) error {
	cfg, err := loadConfig(cmd, true)
	if err != nil {
		return err
	}
	pool, err := openPool(cmd.Context(), cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(cmd.Context(), pool, cfg)
}

// printResult writes v as one JSON object with --json, else the line text.
// Text lines carry provider ids, keys and reasons someone else chose: they
// are escaped (package safetext) so that no control character reaches the
// terminal; JSON escapes its own.
func printResult(out io.Writer, asJSON bool, v any, text string) error {
	if asJSON {
		return json.NewEncoder(out).Encode(v)
	}
	_, err := fmt.Fprintln(out, safetext.Escape(text))
	return err
}

// printList writes items as a JSON array (never null) with --json, else one
// line each (line) and then the summary, each line escaped as printResult's.
func printList[T any](out io.Writer, items []T, asJSON bool, line func(T) string, summary string) error {
	if asJSON {
		if items == nil {
			items = []T{}
		}
		return json.NewEncoder(out).Encode(items)
	}
	for _, it := range items {
		fmt.Fprintln(out, safetext.Escape(line(it)))
	}
	_, err := fmt.Fprintln(out, safetext.Escape(summary))
	return err
}

// count is "1 payment", "0 payments", "2 payments": n and the noun, plural
// unless n is one.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
