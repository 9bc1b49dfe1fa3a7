package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/players"
)

// demoSeed is what billing dev creates once and keeps in <dir>/demo.json, so
// a restart prints the same working API key (only its hash is in the database).
type demoSeed struct {
	PlayerID int64  `json:"player_id,string"`
	APIKey   string `json:"api_key"`
}

func seedDemo(ctx context.Context, pool *pgxpool.Pool, _ *config.Config, dir string) (*demoSeed, error) {
	path := filepath.Join(dir, "demo.json")
	var seed demoSeed
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &seed) == nil {
		if id, err := players.Authenticate(ctx, pool, seed.APIKey); err == nil && id == seed.PlayerID {
			return &seed, nil
		}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	p, key, err := players.Create(ctx, pool, "demo")
	if err != nil {
		return nil, fmt.Errorf("seed demo player: %w", err)
	}
	seed = demoSeed{PlayerID: p.ID, APIKey: key}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(seed, "", "  ")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return &seed, nil
}

func (s *demoSeed) print(w io.Writer, base string) {
	fmt.Fprintf(w, `
Demo player %d, API key:
  %s
Try:
  curl -s -H 'Authorization: Bearer %s' %s/v1/wallets
`, s.PlayerID, s.APIKey, s.APIKey, base)
}
