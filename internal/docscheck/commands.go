package docscheck

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Command is a byoc command line a page shows.
type Command struct {
	Line int
	Text string // the command line as shown, from "byoc"
	// Words are the words after byoc that may name (sub)commands, up to
	// the first flag, placeholder or other argument-looking word; each
	// has one or more alternatives ("list|get" in prose).
	Words [][]string
	// Inline is set for a command in a code span of prose rather than in
	// a fenced code block.
	Inline bool
}

// IgnoreMarker on a line exempts its commands from the check.
const IgnoreMarker = "<!-- docscheck:ignore -->"

var wordRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Commands returns the byoc command lines of a page: every shell command
// in a fenced code block whose program is byoc (also bin/byoc, after
// `$ `, `sudo`, `&&`, `|`, `;` or `$(`), and every code span of prose that
// starts with "byoc " and a word. IgnoreMarker (an HTML comment, which
// GitHub does not show) right after a code span, or on a code block's
// line, exempts that command: one shown mistyped on purpose.
func Commands(text string) []Command {
	var out []Command
	for i, l := range splitLines(text) {
		if strings.Contains(l.text, IgnoreMarker) {
			continue
		}
		if l.fence {
			if fenceRE.MatchString(l.text) {
				continue
			}
			s := l.text
			if c := commentStart(s); c >= 0 {
				s = s[:c]
			}
			for _, seg := range segments(s) {
				if c, ok := parse(seg, false); ok {
					c.Line = i + 1
					out = append(out, c)
				}
			}
		}
	}
	spans, _ := proseSpans(text)
	for _, s := range spans {
		if !strings.HasPrefix(s.text, "byoc ") || s.ignored {
			continue
		}
		if c, ok := parse(s.text, true); ok && len(c.Words) > 0 {
			c.Line = s.line
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b Command) int { return a.Line - b.Line })
	return out
}

// commentStart is where a shell comment starts on a line (a # at its
// start or after a blank, outside quotes), or -1.
func commentStart(s string) int {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return i
		}
	}
	return -1
}

// segments splits a shell line into simple commands at ; & | ( and
// backquotes outside quotes (and at $( and backquotes inside double
// quotes, where the shell substitutes them too).
func segments(s string) []string {
	var out []string
	var quote byte
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && (c == '`' || c == '(' && i > 0 && s[i-1] == '$'):
			out = append(out, s[start:i])
			start = i + 1
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == ';' || c == '&' || c == '|' || c == '(' || c == '`':
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// parse reads one simple command; ok when its program is byoc.
func parse(seg string, inline bool) (Command, bool) {
	f := strings.Fields(seg)
	for len(f) > 0 && (f[0] == "$" || f[0] == "sudo" || f[0] == "env" || f[0] == "nice" || f[0] == "time" ||
		(strings.Contains(f[0], "=") && !strings.HasPrefix(f[0], "-"))) {
		f = f[1:]
	}
	if len(f) == 0 || path.Base(f[0]) != "byoc" {
		return Command{}, false
	}
	c := Command{Text: strings.Join(f, " "), Inline: inline}
	for _, w := range f[1:] {
		alts := []string{w}
		if inline {
			alts = strings.Split(w, "|")
		}
		okWord := true
		for _, a := range alts {
			if !wordRE.MatchString(a) {
				okWord = false
			}
		}
		if !okWord {
			break
		}
		c.Words = append(c.Words, alts)
	}
	return c, true
}

// Tree is a command and its subcommands, as the CLI defines them.
type Tree struct {
	Name    string
	Aliases []string
	Subs    []*Tree
}

func (t *Tree) sub(name string) *Tree {
	for _, s := range t.Subs {
		if s.Name == name {
			return s
		}
		for _, a := range s.Aliases {
			if a == name {
				return s
			}
		}
	}
	return nil
}

// Check reports why c names a command root does not have, or "" when
// every word naming a command does. A word after a command without
// subcommands is an argument and is not checked.
func (t *Tree) Check(c Command) string {
	cur := t
	where := t.Name
	for _, alts := range c.Words {
		if len(cur.Subs) == 0 {
			return ""
		}
		var next *Tree
		for _, a := range alts {
			s := cur.sub(a)
			if s == nil {
				names := make([]string, len(cur.Subs))
				for i, s := range cur.Subs {
					names[i] = s.Name
				}
				return fmt.Sprintf("%q: %q has no command %q (it has %s)", c.Text, where, a, strings.Join(names, ", "))
			}
			next = s
		}
		if len(alts) > 1 {
			return "" // several alternatives: each exists; their arguments are not followed
		}
		cur = next
		where += " " + next.Name
	}
	return ""
}
