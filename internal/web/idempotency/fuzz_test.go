package idempotency_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/web/idempotency"
)

// FuzzParseKey checks the documented rule of the Idempotency-Key parser
// (docs/contract.md, ParseKey): a key is 1 to 255 printable ASCII characters
// (0x20-0x7e), sent bare or as a structured-field string ("quoted", with
// \" and \\ escapes); both forms name the same key; surrounding whitespace
// is not part of either form. Everything else is ErrInvalidKey.
//
// The seeds under testdata/fuzz/FuzzParseKey run as an ordinary test;
// `go test -run '^$' -fuzz '^FuzzParseKey$' ./idempotency/` (or
// scripts/fuzz-short) explores further.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"k", `"k"`, ` "a b" `, `"a\"b\\c"`, "8e4f0c2a9b1d4c7e8f0a1b2c3d4e5f60"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := idempotency.ParseKey(v)
		if err != nil {
			require.ErrorIs(t, err, idempotency.ErrInvalidKey, "%q", v)
			require.Empty(t, key)
		} else {
			requireValidKey(t, v, key)
		}

		// Surrounding whitespace never changes the answer.
		padded, perr := idempotency.ParseKey(" \t" + v + "\t ")
		require.Equal(t, key, padded, "%q", v)
		require.Equal(t, err == nil, perr == nil, "%q", v)

		if err != nil {
			return
		}
		// The quoted form of an accepted key parses to the same key ...
		quoted, qerr := idempotency.ParseKey(quote(key))
		require.NoError(t, qerr, "quoted form of %q", key)
		require.Equal(t, key, quoted)
		// ... and so does the bare form, wherever the bare form is not
		// ambiguous (leading or trailing spaces are trimmed; a bare key that
		// itself starts and ends with '"' reads as a quoted one).
		if key == strings.TrimSpace(key) && !looksQuoted(key) {
			bare, berr := idempotency.ParseKey(key)
			require.NoError(t, berr, "bare form of %q", key)
			require.Equal(t, key, bare)
		}

		// A control character or a non-ASCII byte inside the key is refused
		// in both forms, wherever it sits.
		mid := len(key) / 2
		for _, bad := range []string{"\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x7f", "\u00e9", "\xff", "\u2028"} {
			withBad := key[:mid] + bad + key[mid:]
			_, qerr := idempotency.ParseKey(quote(withBad))
			require.ErrorIs(t, qerr, idempotency.ErrInvalidKey, "quoted %q", withBad)
			if strings.TrimSpace(key[:mid]) != "" && strings.TrimSpace(key[mid:]) != "" { // not trimmed as surrounding space
				_, berr := idempotency.ParseKey(withBad)
				require.ErrorIs(t, berr, idempotency.ErrInvalidKey, "bare %q", withBad)
			}
		}

		// One character too many is refused.
		long := key + strings.Repeat("a", idempotency.MaxKeyLength+1-len(key))
		_, lerr := idempotency.ParseKey(quote(long))
		require.ErrorIs(t, lerr, idempotency.ErrInvalidKey, "%d chars", len(long))
		if long == strings.TrimSpace(long) && !looksQuoted(long) {
			_, lerr = idempotency.ParseKey(long)
			require.ErrorIs(t, lerr, idempotency.ErrInvalidKey, "%d chars", len(long))
		}
	})
}

// requireValidKey: an accepted key is 1..255 printable ASCII characters.
func requireValidKey(t *testing.T, in, key string) {
	t.Helper()
	require.GreaterOrEqual(t, len(key), 1, "%q", in)
	require.LessOrEqual(t, len(key), idempotency.MaxKeyLength, "%q", in)
	for i := 0; i < len(key); i++ {
		require.True(t, key[i] >= 0x20 && key[i] <= 0x7e, "%q accepted with byte %#x", in, key[i])
	}
}

// quote is the structured-field string form of key.
func quote(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

func looksQuoted(s string) bool { return len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' }
