// Package names is the one rule for every user-visible name (a Marquee's,
// a playground's): text that shows as what it is. Each place that stores a
// name keeps its own length limit and error but asks Valid.
package names

import (
	"unicode"
	"unicode/utf8"
)

// Valid reports whether name is 1 to maxRunes printable characters
// (unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the
// ASCII space) of valid UTF-8. It refuses what would make a name display
// as something else or hide characters: controls (NUL, tab, U+0085),
// format characters (U+200B zero width space, U+202E right-to-left
// override), and line and paragraph separators (U+2028, U+2029).
func Valid(name string, maxRunes int) bool {
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > maxRunes {
		return false
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
