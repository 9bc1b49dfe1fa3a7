package devreceiver_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/devreceiver"
)

func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// start serves a receiver over real HTTP.
func start(t *testing.T, opts devreceiver.Options) (*devreceiver.Receiver, *httptest.Server) {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	r, err := devreceiver.New(opts)
	require.NoError(t, err)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func eventID(n int) string { return fmt.Sprintf("evt_%032x", n) }

func body(id, typ string, player, seq int64) []byte {
	return []byte(`{"id":"` + id + `","type":"` + typ + `","api_version":"2026-12-01","created_at":"2026-12-01T10:00:00Z",` +
		`"player_id":` + strconv.FormatInt(player, 10) + `,"sequence":` + strconv.FormatInt(seq, 10) +
		`,"data":{"mana_forgiven":20,"mana_outstanding":0,"reason":"support"}}`)
}

// post delivers body as billing does, signed by the Standard Webhooks
// reference library with secret, and returns the answer's status and body.
func post(t *testing.T, url, secret, id string, b []byte) (int, string) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	now := time.Now()
	sig, err := wh.Sign(id, now, b)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, url+devreceiver.Path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(answer)
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

type listing struct {
	Endpoint   string                 `json:"endpoint"`
	Deliveries []devreceiver.Delivery `json:"deliveries"`
}

func list(t *testing.T, url string) listing {
	t.Helper()
	resp, b := get(t, url+devreceiver.Path+"?format=json")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var l listing
	dec := json.NewDecoder(strings.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&l), b)
	return l
}

// TestReceiverVerifiesAndMarks: a delivery verifies (200), the same
// webhook-id again is a duplicate (200), an overtaken sequence is stale
// (200), a delivery under another secret is not verified (400); the JSON
// form lists them newest first with each mark.
func TestReceiverVerifiesAndMarks(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	_, srv := start(t, devreceiver.Options{Secrets: []string{secret}})

	status, answer := post(t, srv.URL, secret, eventID(1), body(eventID(1), "debt.forgiven", 7, 5))
	require.Equal(t, http.StatusOK, status, answer)
	require.JSONEq(t, `{"verified":true,"duplicate":false,"stale":false,"error":""}`, answer)
	status, _ = post(t, srv.URL, secret, eventID(1), body(eventID(1), "debt.forgiven", 7, 5))
	require.Equal(t, http.StatusOK, status, "a duplicate is answered 2xx")
	status, _ = post(t, srv.URL, secret, eventID(2), body(eventID(2), "debt.forgiven", 7, 4))
	require.Equal(t, http.StatusOK, status, "a stale one is answered 2xx")
	status, _ = post(t, srv.URL, secret, eventID(3), body(eventID(3), "debt.forgiven", 8, 1))
	require.Equal(t, http.StatusOK, status, "another player's sequence is its own")
	status, answer = post(t, srv.URL, newSecret(t), eventID(4), body(eventID(4), "debt.forgiven", 7, 6))
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, answer, "no webhook signature matches")

	l := list(t, srv.URL)
	require.Equal(t, devreceiver.Path, l.Endpoint)
	require.Len(t, l.Deliveries, 5)
	type mark struct {
		id                         string
		player, seq                int64
		verified, duplicate, stale bool
	}
	var got []mark
	for _, d := range l.Deliveries {
		require.Equal(t, "debt.forgiven", d.Type)
		require.WithinDuration(t, time.Now(), d.ReceivedAt, 2*time.Minute)
		require.Contains(t, d.Body, d.WebhookID)
		got = append(got, mark{d.WebhookID, d.PlayerID, d.Sequence, d.Verified, d.Duplicate, d.Stale})
		require.Equal(t, !d.Verified, d.Error != "", "an error exactly when not verified")
	}
	require.Equal(t, []mark{
		{eventID(4), 7, 6, false, false, false},
		{eventID(3), 8, 1, true, false, false},
		{eventID(2), 7, 4, true, false, true},
		{eventID(1), 7, 5, true, true, false},
		{eventID(1), 7, 5, true, false, false},
	}, got)
}

// TestReceiverPageEscapes: the HTML page lists each delivery with its
// marks, and what a delivery carries (here a forged one) is escaped.
func TestReceiverPageEscapes(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	_, srv := start(t, devreceiver.Options{Secrets: []string{secret}})

	resp, page := get(t, srv.URL+devreceiver.Path)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `id="empty"`)
	_, empty := get(t, srv.URL+devreceiver.Path+"?format=json")
	require.JSONEq(t, `{"endpoint":"/dev/events/","deliveries":[]}`, empty)

	post(t, srv.URL, secret, eventID(1), body(eventID(1), "debt.forgiven", 7, 5))
	post(t, srv.URL, secret, eventID(1), body(eventID(1), "debt.forgiven", 7, 5))
	evil := `<script>alert(1)</script>`
	status, _ := post(t, srv.URL, newSecret(t), "evt_<b>x</b>", body(eventID(9), evil, 7, 9))
	require.Equal(t, http.StatusBadRequest, status)

	resp, page = get(t, srv.URL+devreceiver.Path)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Equal(t, 3, strings.Count(page, `<tr class="delivery">`))
	require.Equal(t, 2, strings.Count(page, `<span class="ok">verified</span>`))
	require.Equal(t, 1, strings.Count(page, `<span class="bad">NOT verified</span>`))
	require.Equal(t, 1, strings.Count(page, `<span class="mark duplicate">duplicate</span>`))
	require.Contains(t, page, "<code>"+eventID(1)+"</code>")
	require.NotContains(t, page, "<script>")
	require.NotContains(t, page, "<b>x</b>")
	require.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Contains(t, page, "evt_&lt;b&gt;x&lt;/b&gt;")
}

// TestReceiverConcurrentDuplicates: N copies of one delivery racing:
// every one is answered 200, exactly one is new, the others duplicates.
func TestReceiverConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	r, srv := start(t, devreceiver.Options{Secrets: []string{secret}})
	const n = 16
	b := body(eventID(1), "debt.forgiven", 7, 5)
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for range n {
		wg.Go(func() {
			status, _ := post(t, srv.URL, secret, eventID(1), b)
			statuses <- status
		})
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		require.Equal(t, http.StatusOK, s)
	}
	deliveries := r.Deliveries()
	require.Len(t, deliveries, n)
	fresh := 0
	for _, d := range deliveries {
		require.True(t, d.Verified)
		require.False(t, d.Stale, "a copy is a duplicate, never stale")
		if !d.Duplicate {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "exactly one copy is new")
}

// TestReceiverKeepsTheNewest: only Keep deliveries are listed, and an id
// that left the list is still known as a duplicate.
func TestReceiverKeepsTheNewest(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	r, srv := start(t, devreceiver.Options{Secrets: []string{secret}, Keep: 3})
	for i := 1; i <= 5; i++ {
		post(t, srv.URL, secret, eventID(i), body(eventID(i), "debt.forgiven", 7, int64(i)))
	}
	var ids []string
	for _, d := range r.Deliveries() {
		ids = append(ids, d.WebhookID)
	}
	require.Equal(t, []string{eventID(5), eventID(4), eventID(3)}, ids)
	post(t, srv.URL, secret, eventID(1), body(eventID(1), "debt.forgiven", 7, 1))
	d := r.Deliveries()[0]
	require.Equal(t, eventID(1), d.WebhookID)
	require.True(t, d.Duplicate)
}

// TestReceiverDuringRotation: with the old and the new secret, a delivery
// signed with either verifies.
func TestReceiverDuringRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := newSecret(t), newSecret(t)
	_, srv := start(t, devreceiver.Options{Secrets: []string{oldSecret, newSecret}})
	for i, s := range []string{oldSecret, newSecret} {
		status, answer := post(t, srv.URL, s, eventID(i), body(eventID(i), "debt.forgiven", 7, int64(i+1)))
		require.Equal(t, http.StatusOK, status, answer)
	}
}

// TestReceiverRefuses: no secret or a malformed one makes no receiver;
// another method or path is not served; an oversized body is refused.
func TestReceiverRefuses(t *testing.T) {
	t.Parallel()
	_, err := devreceiver.New(devreceiver.Options{})
	require.Error(t, err)
	_, err = devreceiver.New(devreceiver.Options{Secrets: []string{"not-a-secret"}})
	require.Error(t, err)

	secret := newSecret(t)
	r, srv := start(t, devreceiver.Options{Secrets: []string{secret}})
	req, err := http.NewRequest(http.MethodPut, srv.URL+devreceiver.Path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	resp, _ = get(t, srv.URL+devreceiver.Path+"other")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	status, _ := post(t, srv.URL, secret, eventID(1), bytes.Repeat([]byte("x"), 1<<20+1))
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Empty(t, r.Deliveries())
}
