// Package safetext makes text that someone else chose safe to print on an
// operator's terminal or in a text log line. Provider ids, event ids and
// error messages reach billing's text outputs verbatim; a terminal acts on
// the control characters among them (an ESC sequence clears or recolours
// the screen, a bidi override reorders what follows), so every text output
// passes what it prints through Escape. JSON outputs escape by themselves.
package safetext

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every byte a terminal could act on, or that is not
// text, spelled as a Go escape: C0 controls, DEL and C1 controls ("\x1b",
// "\n", "\u0085"), other runes that print nothing (bidi overrides
// "\u202e", zero-width and line separators), and the bytes of invalid
// UTF-8 ("\xff"). Everything printable, the ASCII space included, is kept
// as is, so an ordinary id prints unchanged (s itself is returned).
func Escape(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case safe(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e', '\n'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// firstUnsafe is the index of the first byte Escape changes, or -1.
func firstUnsafe(s string) int {
	for i, r := range s {
		if r < utf8.RuneSelf {
			if r < 0x20 || r == 0x7f {
				return i
			}
			continue
		}
		if r == utf8.RuneError || !safe(r) {
			return i // a replacement character as sent is rare enough to take the slow path
		}
	}
	return -1
}

// safe reports whether r prints as itself: a graphic rune or the ASCII
// space (unicode.IsPrint), which excludes every control and format rune.
func safe(r rune) bool { return unicode.IsPrint(r) }
