package fibe_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fibe-dev/billing/fibe"
)

// Rotate the API key of a long-running process without an outage. An
// operator runs `billing players keys rotate --player ID`, which prints the
// new key once and keeps the old one working for 24 hours (or
// --old-valid-for). The process makes a Client with the new key and swaps
// it in; calls in flight on the old Client finish under the old key.
// Idempotency-Keys belong to the player, not to the API key, so a call
// retried on the new Client with the same key (WithIdempotencyKey) replays
// the first answer. Once the old key is revoked or has expired it answers
// 401 unauthorized, which is never retried: reload the key then.
func Example_rotateAPIKey() {
	srv := startKeyedAPI("bk_old_key", "bk_new_key")
	defer srv.Close()
	ctx := context.Background()
	var client atomic.Pointer[fibe.Client] // shared by every goroutine of the process
	client.Store(fibe.NewClient(srv.URL, "bk_old_key"))

	// The new key arrives (from your secret store): swap the client.
	client.Store(fibe.NewClient(srv.URL, "bk_new_key"))
	w, err := client.Load().Wallets.Get(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("mana", w.Mana.Balance)

	// The old key, once its time is over or it is revoked:
	srv.revoke("bk_old_key")
	_, err = fibe.NewClient(srv.URL, "bk_old_key").Wallets.Get(ctx)
	if fibe.IsCode(err, "unauthorized") {
		fmt.Println("old key refused: 401")
	}
	// Output:
	// mana 100
	// old key refused: 401
}

// keyedAPI answers GET /v1/wallets to the keys it holds, and 401 to others.
type keyedAPI struct {
	*httptest.Server
	mu   sync.Mutex
	keys map[string]bool
}

func startKeyedAPI(keys ...string) *keyedAPI {
	a := &keyedAPI{keys: map[string]bool{}}
	for _, k := range keys {
		a.keys[k] = true
	}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		ok := a.keys[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		a.mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"status":401,"code":"unauthorized","detail":"a valid API key is required"}`)
			return
		}
		_, _ = io.WriteString(w, `{"mana":{"balance":100},"sparks":{"balance":0}}`)
	}))
	return a
}

func (a *keyedAPI) revoke(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.keys, key)
}
