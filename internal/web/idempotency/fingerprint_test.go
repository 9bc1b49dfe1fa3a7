package idempotency_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/web/idempotency"
)

// TestCanonicalForm: spellings of one JSON value have one form; different
// values, numbers written differently, and bodies that are not one JSON
// value do not.
func TestCanonicalForm(t *testing.T) {
	t.Parallel()
	for want, spellings := range map[string][]string{
		`{"mana":5}`:                          {`{"mana": 5}`, "{\n  \"mana\" : 5\n}\n", `{"m\u0061na":5}`, ` {"mana":5} `},
		`{"name":"a","plan":"b"}`:             {`{"plan":"b","name":"a"}`, `{ "plan" : "b" , "name" : "a" }`},
		`{"a":{"x":1,"y":[2,{"b":1,"c":2}]}}`: {`{"a":{"y":[2,{"c":2,"b":1}],"x":1}}`},
		`{"name":"A\"é<"}`:                    {`{"name":"\u0041\"\u00e9\u003c"}`, `{"name":"A\u0022é<"}`},
		`[]`:                                  {`[ ]`},
		``:                                    {``, " \n\t"},
		`{"x":[true,false,null]}`:             {`{"x":[ true , false , null ]}`},
	} {
		for _, s := range spellings {
			require.Equal(t, want, string(idempotency.Canonical([]byte(s))), "%q", s)
		}
	}
	distinct := []string{`{"mana":5}`, `{"mana":5.0}`, `{"mana":5e0}`, `{"mana":"5"}`, `{"MANA":5}`,
		`{"mana":9007199254740993}`, `{"mana":9007199254740992}`, `[1,2]`, `[2,1]`, `{}`, ``}
	seen := map[string]string{}
	for _, s := range distinct {
		form := string(idempotency.Canonical([]byte(s)))
		require.NotContains(t, seen, form, "%q and %q share a form", s, seen[form])
		seen[form] = s
	}
	for _, bad := range []string{`{"mana":1,"mana":2}`, `{"mana":1} {}`, `{"mana":`, "\"\xff\"", `{'a':1}`, `nul`} {
		require.Nil(t, idempotency.Canonical([]byte(bad)), "%q is not one JSON value", bad)
	}
}

// TestFingerprintIsCanonical: equal requests share a fingerprint whatever
// the spelling; another method, path or body does not; a body that is not
// JSON is compared byte for byte.
func TestFingerprintIsCanonical(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	first := f.post(t, f.player, "k", `{"mana": 5, "note": "x"}`)
	require.Equal(t, http.StatusCreated, first.status)
	for _, again := range []string{`{"note":"x","mana":5}`, `{"mana":5,"note":"\u0078"}`, "{\n\"mana\":5,\"note\":\"x\"}"} {
		r := f.post(t, f.player, "k", again)
		require.Equal(t, http.StatusCreated, r.status, again)
		require.True(t, r.replayed, again)
		require.Equal(t, first.body, r.body)
	}
	for _, other := range []string{`{"mana":5.0,"note":"x"}`, `{"mana":5}`, `{"mana":5,"note":"X"}`} {
		require.Equal(t, http.StatusUnprocessableEntity, f.post(t, f.player, "k", other).status, other)
	}
	require.Equal(t, http.StatusCreated, f.post(t, f.player, "raw", `not json`).status)
	require.True(t, f.post(t, f.player, "raw", `not json`).replayed)
	require.Equal(t, http.StatusUnprocessableEntity, f.post(t, f.player, "raw", `not  json`).status)
	require.Equal(t, 2, f.effects(t))
}

// TestKeysStoredBeforeCanonicalFormsStillReplay: a key stored with the old
// fingerprint (the hash of the exact bytes, no version) within its 24 h
// replays a byte-for-byte retry, and refuses a re-spelled one, since only
// the hash of its bytes was kept.
func TestKeysStoredBeforeCanonicalFormsStillReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	ctx := context.Background()
	body := `{"mana": 5}`
	_, err := f.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (player_id, key, fingerprint, status, response_status, response_headers,
			response_body, created_at, completed_at)
		VALUES ($1, 'old', $2, 'completed', 201, '{"Content-Type":["application/json"]}', '{"id":"41"}', $3, $3)`,
		f.player, oldFingerprint(http.MethodPost, "/v1/things", body), f.clock.Now().Add(-23*time.Hour))
	require.NoError(t, err)
	r := f.post(t, f.player, "old", body)
	require.Equal(t, http.StatusCreated, r.status)
	require.True(t, r.replayed)
	require.Equal(t, `{"id":"41"}`, r.body)
	require.Equal(t, http.StatusUnprocessableEntity, f.post(t, f.player, "old", `{"mana":6}`).status)
	require.Equal(t, http.StatusUnprocessableEntity, f.post(t, f.player, "old", `{"mana":5}`).status,
		"a key stored before canonical forms knows only its bytes")
	require.Zero(t, f.effects(t))
}

// oldFingerprint is the fingerprint stored before canonical forms, written
// out here so that the test does not depend on the code it checks.
func oldFingerprint(method, path, body string) []byte {
	bodySum := sha256.Sum256([]byte(body))
	h := sha256.Sum256([]byte(method + "\x00" + path + "\x00" + string(bodySum[:])))
	return h[:]
}

// FuzzCanonical: a canonical form is its own canonical form and holds the
// same value (numbers compared as written).
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"mana": 5}`, `{"b":[1,{"d":null,"c":"\u00e9"}],"a":true}`, `[]`, `"x"`, `1e3`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		form := idempotency.Canonical(body)
		if form == nil {
			return
		}
		require.Equal(t, string(form), string(idempotency.Canonical(form)))
		if len(form) == 0 {
			require.Empty(t, strings.TrimSpace(string(body)))
			return
		}
		require.Equal(t, decodeNumbers(t, body), decodeNumbers(t, form))
	})
}

func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v), "%q", b)
	return v
}
