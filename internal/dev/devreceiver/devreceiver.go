// Package devreceiver is `billing dev`'s local webhook endpoint for the
// events billing sends: it receives each delivery, verifies it with the
// Go SDK's verifier (fibe.WebhookVerifier) under the endpoint's secret,
// keeps the latest ones in memory, and lists them on a page (HTML, or JSON
// with ?format=json): when each arrived, its webhook-id, type, player and
// sequence, whether its signature verified, and whether it was a duplicate
// (a webhook-id that arrived before) or stale (a sequence below one
// already received for the player). A newcomer sees the events of their
// first purchase arrive, and what at-least-once, unordered delivery looks
// like. It is for development only: only `billing dev` serves it.
package devreceiver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/fibe-dev/billing/fibe"
)

// Path is where `billing dev` mounts the receiver: deliveries are POSTed
// to it, and GET shows what arrived.
const Path = "/dev/events/"

// Defaults of Options.
const (
	DefaultKeep  = 200
	maxBodyBytes = 1 << 20
	maxShownBody = 16 << 10 // a body is kept up to this many bytes for the page
)

// Options configure New.
type Options struct {
	// Secrets are the endpoint's whsec_ secrets: a delivery verifies when
	// it verifies under any of them (two while a secret is rotated).
	Secrets []string
	// Keep is how many deliveries are kept, the newest (DefaultKeep if 0).
	Keep int
	// Now is the clock (time.Now if nil).
	Now    func() time.Time
	Logger *slog.Logger
}

// Delivery is one request the receiver got, verified or not.
type Delivery struct {
	ReceivedAt time.Time `json:"received_at"`
	WebhookID  string    `json:"webhook_id"` // the header as sent
	Type       string    `json:"type,omitempty"`
	PlayerID   int64     `json:"player_id,omitempty"`
	Sequence   int64     `json:"sequence,omitempty"`
	Verified   bool      `json:"verified"`
	Error      string    `json:"error,omitempty"` // why it did not verify
	// Duplicate: a verified delivery with this webhook-id arrived before.
	Duplicate bool `json:"duplicate"`
	// Stale: verified, new, and its sequence is below the highest one
	// received for its player (it was overtaken; a consumer drops it).
	Stale bool   `json:"stale"`
	Body  string `json:"body"` // up to 16 KiB of it
}

// Receiver is the endpoint and its page: an http.Handler for Path.
type Receiver struct {
	opts      Options
	verifiers []*fibe.WebhookVerifier
	mux       *http.ServeMux

	mu         sync.Mutex
	deliveries []Delivery      // oldest first, at most opts.Keep
	seen       map[string]bool // webhook-ids received verified
	seenOrder  []string        // seen's keys, oldest first, to bound it
	highest    map[int64]int64 // player -> highest verified sequence
}

// New returns a receiver verifying deliveries with opts.Secrets.
func New(opts Options) (*Receiver, error) {
	if len(opts.Secrets) == 0 {
		return nil, errors.New("devreceiver: no endpoint secret")
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Receiver{opts: opts, mux: http.NewServeMux(), seen: map[string]bool{}, highest: map[int64]int64{}}
	for _, s := range opts.Secrets {
		v, err := fibe.NewWebhookVerifier(s, fibe.WithWebhookClock(opts.Now))
		if err != nil {
			return nil, fmt.Errorf("devreceiver: %w", err)
		}
		r.verifiers = append(r.verifiers, v)
	}
	r.mux.HandleFunc("POST "+Path+"{$}", r.receive)
	r.mux.HandleFunc("GET "+Path+"{$}", r.list)
	return r, nil
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.mux.ServeHTTP(w, req) }

// Deliveries returns the kept deliveries, newest first.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Delivery, len(r.deliveries)) // [] rather than null in JSON
	copy(out, r.deliveries)
	slices.Reverse(out)
	return out
}

// receive records a delivery and answers as a consumer should: 200 once
// verified (a duplicate or a stale one too: it is known), 400 when it does
// not verify, so that billing's delivery worker records the failure.
func (r *Receiver) receive(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBodyBytes))
	if err != nil {
		http.Error(w, "body unreadable or over 1 MiB: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	d := r.verify(req.Header, body)
	d = r.record(d)
	r.opts.Logger.InfoContext(req.Context(), "dev receiver: event delivery", "webhook_id", d.WebhookID,
		"type", d.Type, "verified", d.Verified, "duplicate", d.Duplicate, "stale", d.Stale, "error", d.Error)
	w.Header().Set("Content-Type", "application/json")
	if !d.Verified {
		w.WriteHeader(http.StatusBadRequest)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"verified": d.Verified, "duplicate": d.Duplicate, "stale": d.Stale, "error": d.Error})
}

// verify checks the delivery under each secret; the first that verifies
// wins, else the first secret's refusal is the reason shown.
func (r *Receiver) verify(h http.Header, body []byte) Delivery {
	d := Delivery{ReceivedAt: r.opts.Now().UTC(), WebhookID: h.Get(fibe.HeaderWebhookID), Body: string(body[:min(len(body), maxShownBody)])}
	var firstErr error
	for _, v := range r.verifiers {
		ev, err := v.Verify(h, body)
		if err == nil {
			d.Verified, d.Type, d.PlayerID, d.Sequence = true, ev.Type, ev.PlayerID, ev.Sequence
			return d
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	d.Error = firstErr.Error()
	// What the body says, for the page, although it is not to be trusted.
	var ev fibe.Event
	if json.Unmarshal(body, &ev) == nil {
		d.Type, d.PlayerID, d.Sequence = ev.Type, ev.PlayerID, ev.Sequence
	}
	return d
}

// record marks d duplicate or stale against what was received before and
// keeps it, dropping the oldest beyond Keep.
func (r *Receiver) record(d Delivery) Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	d.Duplicate = r.seen[d.WebhookID]
	if d.Verified && !d.Duplicate {
		d.Stale = d.Sequence < r.highest[d.PlayerID]
		r.highest[d.PlayerID] = max(r.highest[d.PlayerID], d.Sequence)
		r.seen[d.WebhookID] = true
		r.seenOrder = append(r.seenOrder, d.WebhookID)
		if len(r.seenOrder) > 50*r.opts.Keep { // remember ids well past the kept list, not forever
			delete(r.seen, r.seenOrder[0])
			r.seenOrder = r.seenOrder[1:]
		}
	}
	r.deliveries = append(r.deliveries, d)
	if len(r.deliveries) > r.opts.Keep {
		r.deliveries = slices.Delete(r.deliveries, 0, len(r.deliveries)-r.opts.Keep)
	}
	return d
}
