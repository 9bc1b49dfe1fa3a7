// Package docs holds no code: its test checks that every relative link in
// the repository's Markdown (README.md and docs/) resolves to a file or
// directory inside the repository, and every #anchor to a heading of its
// target, so that moving or renaming a file or a heading cannot leave a
// reader at a dead end.
package docs

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// root is the repository, seen from this package's directory.
const root = ".."

// linkRE matches an inline Markdown link or image: [text](target "title").
var linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeSpanRE matches inline code, whose brackets are not links.
var codeSpanRE = regexp.MustCompile("`[^`]*`")

func TestRelativeLinksResolve(t *testing.T) {
	t.Parallel()
	files := markdownFiles(t)
	require.NotEmpty(t, files)
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		anchors[f] = headingAnchors(t, f)
	}
	absRoot, err := filepath.Abs(root)
	require.NoError(t, err)
	for _, f := range files {
		for _, l := range links(t, f) {
			if msg := checkLink(absRoot, f, l.target, anchors); msg != "" {
				t.Errorf("%s:%d: link %q: %s", rel(f), l.line, l.target, msg)
			}
		}
	}
}

// TestHeadingAnchor pins the anchor rule the links rely on (GitHub's).
func TestHeadingAnchor(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"The River seam":                   "the-river-seam",
		"Today's ceilings":                 "todays-ceilings",
		"3. One primary's commit rate":     "3-one-primarys-commit-rate",
		"`ledger verify`, second pass":     "ledger-verify-second-pass",
		"Rotating a webhook secret (keys)": "rotating-a-webhook-secret-keys",
	} {
		require.Equal(t, want, anchor(heading), heading)
	}
}

// checkLink says what is wrong with target, linked from file, or "".
func checkLink(absRoot, file, target string, anchors map[string]map[string]bool) string {
	u, err := url.Parse(target)
	switch {
	case err != nil:
		return err.Error()
	case u.Scheme != "" || strings.HasPrefix(target, "//"):
		return "" // a web address: not checked here
	case strings.HasPrefix(u.Path, "/"):
		return "absolute path: link relative to the file instead"
	}
	dest := file
	if u.Path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(u.Path))
	}
	absDest, err := filepath.Abs(dest)
	if err != nil {
		return err.Error()
	}
	if absDest != absRoot && !strings.HasPrefix(absDest, absRoot+string(filepath.Separator)) {
		return "points outside the repository"
	}
	if _, err := os.Stat(dest); err != nil {
		return "no such file or directory"
	}
	if u.Fragment == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	if known, ok := anchors[filepath.Clean(dest)]; ok && !known[u.Fragment] {
		return fmt.Sprintf("no heading with anchor #%s in %s", u.Fragment, rel(dest))
	}
	return ""
}

// markdownFiles are README.md and every .md file under docs/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, filepath.Join(root, "docs", path))
		}
		return err
	})
	require.NoError(t, err)
	for i, f := range files {
		files[i] = filepath.Clean(f)
	}
	return files
}

type link struct {
	line   int
	target string
}

// links are the inline links of file outside fenced code blocks and code
// spans.
func links(t *testing.T, file string) []link {
	t.Helper()
	var out []link
	eachLine(t, file, func(n int, line string) {
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
			out = append(out, link{line: n, target: m[1]})
		}
	})
	return out
}

// headingAnchors are the anchors of file's headings, with GitHub's -1, -2
// suffixes for repeated ones.
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	eachLine(t, file, func(_ int, line string) {
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			return
		}
		a := anchor(text)
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	})
	return out
}

// anchor is GitHub's anchor of a heading: lower case, letters, digits,
// spaces (as hyphens), hyphens and underscores kept, everything else
// dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// eachLine calls fn for every line of file outside fenced code blocks.
func eachLine(t *testing.T, file string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	fenced := false
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced && !strings.HasPrefix(line, "    ") {
			fn(n, line)
		}
	}
	require.NoError(t, s.Err())
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}
