package safetext_test

import (
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/platform/safetext"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                        "",
		"cs_test_a1 b2":           "cs_test_a1 b2",
		"pi_é€😀":                  "pi_é€😀",
		`back\slash "q"`:          `back\slash "q"`,
		"\x1b[2J\x1b[31mred":      `\x1b[2J\x1b[31mred`,
		"a\nb\tc\rd\x00e\x7f":     `a\nb\tc\rd\x00e\x7f`,
		"c1\u0085\u009b31m":       `c1\u0085\u009b31m`,
		"bidi\u202etxt\u2066":     `bidi\u202etxt\u2066`,
		"zw\u200b\u2028\ufeff":    `zw\u200b\u2028\ufeff`,
		"bad\xff\xfe utf8 \xc3":   `bad\xff\xfe utf8 \xc3`,
		"replacement \ufffd kept": "replacement \ufffd kept",
	} {
		require.Equal(t, want, safetext.Escape(in), "%q", in)
	}
}

// Whatever goes in, what comes out is valid UTF-8 of printable runes only.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "pi_1", "\x1b[2J", "\u202e", "\xff", "a\u0085b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := safetext.Escape(s)
		require.True(t, utf8.ValidString(out), "%q", out)
		for _, r := range out {
			require.True(t, unicode.IsPrint(r), "%q keeps %U", out, r)
		}
		if safetext.Escape(out) != out {
			t.Fatalf("escaping %q twice changed it", s)
		}
	})
}
