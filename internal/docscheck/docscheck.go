// Package docscheck reads the project's Markdown documentation for the
// docs check (`make check-docs`, part of `make test`): which pages there
// are (README.md, ARCHITECTURE.md, plugins/README.md and docs/**/*.md),
// their headings as GitHub anchors, their relative links, and the byoc
// command lines they show. Its tests check every link and page length;
// tui/cli's TestDocsCommandsExist checks the commands against the CLI's
// own command tree. Every problem names the page and line. Standard
// library only.
package docscheck

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// MaxLines is the most lines a page may have; MaxReadmeLines the most the
// top-level README.md may have.
const (
	MaxLines       = 600
	MaxReadmeLines = 300
)

// Problem is one finding, at a page's line.
type Problem struct {
	File string // slash-separated, relative to the repository root
	Line int    // 1-based; 0 for the page as a whole
	Msg  string
}

func (p Problem) String() string {
	if p.Line == 0 {
		return fmt.Sprintf("%s: %s", p.File, p.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
}

// Pages lists the documentation pages under root, slash-separated and
// sorted: README.md, ARCHITECTURE.md, plugins/README.md (those that
// exist) and every .md file under docs/.
func Pages(root string) ([]string, error) {
	var out []string
	for _, p := range []string{"README.md", "ARCHITECTURE.md", "plugins/README.md"} {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err == nil {
			out = append(out, p)
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// line is one line of a page and whether it is inside a fenced code block
// (the fence lines themselves count as inside).
type line struct {
	text  string
	fence bool
}

var fenceRE = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")

func splitLines(text string) []line {
	raw := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	out := make([]line, len(raw))
	open := "" // the open fence's marker
	for i, l := range raw {
		m := fenceRE.FindStringSubmatch(l)
		switch {
		case open == "" && m != nil:
			open = m[1]
			out[i] = line{l, true}
		case open != "":
			out[i] = line{l, true}
			if m != nil && m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(l[len(m[0]):]) == "" {
				open = ""
			}
		default:
			out[i] = line{l, false}
		}
	}
	return out
}

var (
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$`)
	mdLinkRE   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// Slug is the anchor GitHub gives a heading's text: the rendered text
// (code spans, emphasis and links reduced to their text), lowercased,
// every character but letters, digits, spaces, hyphens and underscores
// removed, and spaces turned into hyphens.
func Slug(heading string) string {
	s := mdLinkRE.ReplaceAllString(heading, "$1")
	s = strings.NewReplacer("`", "", "*", "").Replace(s)
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors a page's headings (and HTML anchors) make,
// numbering repeats as GitHub does: "x", "x-1", "x-2".
func Anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range splitLines(text) {
		if l.fence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l.text, -1) {
			out[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := Slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// Link is a link target on a page's line.
type Link struct {
	Line   int
	Target string
}

var (
	inlineLinkRE = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	codeSpanRE   = regexp.MustCompile("`+[^`]*`+")
)

// Links returns the inline link and image targets and reference
// definitions of a page, outside code blocks and code spans.
func Links(text string) []Link {
	var out []Link
	for i, l := range masked(text) {
		if l.fence {
			continue
		}
		if m := refDefRE.FindStringSubmatch(l.text); m != nil {
			out = append(out, Link{i + 1, m[1]})
			continue
		}
		for _, m := range inlineLinkRE.FindAllStringSubmatch(l.text, -1) {
			out = append(out, Link{i + 1, m[1]})
		}
	}
	return out
}

// span is a code span of prose, at the line where it starts.
type span struct {
	line int
	text string // without its backticks; a line break inside is a space
	// ignored is set when IgnoreMarker follows the span at once.
	ignored bool
}

// proseSpans finds the code spans of a page's prose (a span may cross a
// line break) and returns them with the page's lines, in which every
// span's content is blanked (line breaks kept).
func proseSpans(text string) ([]span, []line) {
	lines := splitLines(text)
	var spans []span
	for i := 0; i < len(lines); {
		if lines[i].fence {
			i++
			continue
		}
		j := i
		for j < len(lines) && !lines[j].fence {
			j++
		}
		texts := make([]string, j-i)
		for k := range texts {
			texts[k] = lines[i+k].text
		}
		block := []byte(strings.Join(texts, "\n"))
		for _, loc := range codeSpanRE.FindAllIndex(block, -1) {
			s := string(block[loc[0]:loc[1]])
			line := i + 1 + strings.Count(string(block[:loc[0]]), "\n")
			ignored := strings.HasPrefix(strings.TrimLeft(string(block[loc[1]:]), " "), IgnoreMarker)
			spans = append(spans, span{line, strings.ReplaceAll(strings.Trim(s, "`"), "\n", " "), ignored})
			for k := loc[0] + 1; k < loc[1]-1; k++ {
				if block[k] != '\n' {
					block[k] = ' '
				}
			}
		}
		for k, t := range strings.Split(string(block), "\n") {
			lines[i+k].text = t
		}
		i = j
	}
	return spans, lines
}

// masked is the page's lines with code spans blanked.
func masked(text string) []line {
	_, lines := proseSpans(text)
	return lines
}

var schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// CheckLinks checks that every relative link of every page under root
// resolves to a file or directory in the repository and, with an
// #anchor into a Markdown page, to one of its headings.
func CheckLinks(root string) ([]Problem, error) {
	pages, err := Pages(root)
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := anchors[p]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, err
		}
		anchors[p] = Anchors(string(b))
		return anchors[p], nil
	}
	var out []Problem
	for _, p := range pages {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, err
		}
		for _, l := range Links(string(b)) {
			if l.Target == "" || schemeRE.MatchString(l.Target) || strings.HasPrefix(l.Target, "//") {
				continue
			}
			file, anchor, _ := strings.Cut(l.Target, "#")
			target := p
			if file != "" {
				if strings.HasPrefix(file, "/") {
					out = append(out, Problem{p, l.Line, fmt.Sprintf("link %s: use a path relative to the page, not to the site root", l.Target)})
					continue
				}
				target = path.Clean(path.Join(path.Dir(p), file))
				if target == ".." || strings.HasPrefix(target, "../") {
					out = append(out, Problem{p, l.Line, fmt.Sprintf("link %s: leaves the repository", l.Target)})
					continue
				}
				st, err := os.Stat(filepath.Join(root, filepath.FromSlash(target)))
				if err != nil {
					out = append(out, Problem{p, l.Line, fmt.Sprintf("link %s: no file %s", l.Target, target)})
					continue
				}
				if st.IsDir() || !strings.HasSuffix(target, ".md") {
					continue // an anchor into a directory or a non-Markdown file is not checked
				}
			}
			if anchor == "" {
				continue
			}
			a, err := anchorsOf(target)
			if err != nil {
				return nil, err
			}
			if !a[anchor] {
				out = append(out, Problem{p, l.Line, fmt.Sprintf("link %s: no heading with anchor #%s in %s", l.Target, anchor, target)})
			}
		}
	}
	return out, nil
}

// CheckLengths checks that no page is over MaxLines lines, and the
// top-level README.md not over MaxReadmeLines.
func CheckLengths(root string) ([]Problem, error) {
	pages, err := Pages(root)
	if err != nil {
		return nil, err
	}
	var out []Problem
	for _, p := range pages {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, err
		}
		n := strings.Count(string(b), "\n")
		if len(b) > 0 && b[len(b)-1] != '\n' {
			n++
		}
		limit := MaxLines
		if p == "README.md" {
			limit = MaxReadmeLines
		}
		if n > limit {
			out = append(out, Problem{p, limit + 1, fmt.Sprintf("%d lines, over the %d a page may have: split it by reader (docs/README.md)", n, limit)})
		}
	}
	return out, nil
}
