package fibe_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/fibe-dev/billing/fibe"
)

// Receive billing's events: verify each delivery, apply it once although
// billing delivers at least once (deduplicate on the webhook-id, which is
// Event.ID), and drop one older than what was already applied (deliveries
// are not ordered; each carries its resource's state after the effect, so
// the newest wins). Answer 2xx once the event is applied or known, and 4xx
// to a delivery that does not verify. In production the two maps are your
// database: a UNIQUE column of applied event ids, and the highest sequence
// per player, written in the transaction that applies the event.
func ExampleWebhookVerifier_Verify() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // printed by `billing endpoints add`
	verifier, err := fibe.NewWebhookVerifier(secret)
	if err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	applied := map[string]bool{} // event ids applied
	latest := map[int64]int64{}  // player id -> highest sequence applied
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		ev, err := verifier.Verify(r.Header, body)
		if err != nil {
			fmt.Println("refused:", errors.Is(err, fibe.ErrSignatureMismatch))
			http.Error(w, "not verified", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case applied[ev.ID]:
			fmt.Println("duplicate", ev.Type, ev.Sequence)
		case ev.Sequence <= latest[ev.PlayerID]:
			fmt.Println("stale", ev.Type, ev.Sequence)
		default:
			data, err := ev.Decode()
			if err != nil { // a type newer than this SDK: acknowledge, ignore
				fmt.Println("skipped", ev.Type)
				break
			}
			if d, ok := data.(*fibe.WalletLowBalanceData); ok {
				fmt.Printf("player %d: %d days of Sparks left\n", ev.PlayerID, d.DaysCovered)
			} else {
				fmt.Println("applied", ev.Type, ev.Sequence)
			}
			latest[ev.PlayerID] = ev.Sequence
		}
		applied[ev.ID] = true
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	funded := `{"marquee_id":42,"day":"2026-12-01","plan":"standard","sparks_debited":10,"paid_through":"2026-12-02T00:00:00Z"}`
	low := `{"sparks_balance":20,"sparks_per_day":10,"days_covered":2,"threshold_days":3}`
	deliver(receiver.URL, secret, "evt_00000000000000000000000000000041", "marquee.funded", 41, funded)
	deliver(receiver.URL, secret, "evt_00000000000000000000000000000043", "wallet.low_balance", 43, low)
	deliver(receiver.URL, secret, "evt_00000000000000000000000000000043", "wallet.low_balance", 43, low) // a retry
	deliver(receiver.URL, secret, "evt_00000000000000000000000000000042", "marquee.funded", 42, funded)  // overtaken
	deliver(receiver.URL, "whsec_"+base64.StdEncoding.EncodeToString([]byte("not the secret")),
		"evt_00000000000000000000000000000044", "marquee.funded", 44, funded)
	// Output:
	// applied marquee.funded 41
	// player 123: 2 days of Sparks left
	// duplicate wallet.low_balance 43
	// stale marquee.funded 42
	// refused: true
}

// deliver POSTs an event of player 123 signed with secret, as billing does.
func deliver(url, secret, id, typ string, seq int64, data string) {
	body := []byte(`{"id":"` + id + `","type":"` + typ + `","api_version":"2026-12-01","created_at":"2026-12-01T10:00:00Z",` +
		`"player_id":123,"sequence":` + strconv.FormatInt(seq, 10) + `,"data":` + data + `}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	key, _ := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}
