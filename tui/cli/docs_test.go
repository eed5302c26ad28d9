package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/docscheck"
	"github.com/spf13/cobra"
)

// commandTree is the byoc command tree as cobra runs it (help and
// completion included).
func commandTree() *cobra.Command {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		getenv: func(string) string { return "" }, now: time.Now, terminal: func(io.Writer) bool { return false }}
	root := a.rootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

func toTree(c *cobra.Command) *docscheck.Tree {
	t := &docscheck.Tree{Name: c.CommandPath(), Aliases: c.Aliases}
	if c.HasParent() {
		t.Name = c.Name()
	}
	for _, s := range c.Commands() {
		t.Subs = append(t.Subs, toTree(s))
	}
	return t
}

// TestDocsCommandsExist checks that every byoc command line the docs show
// (README.md, ARCHITECTURE.md, plugins/README.md, docs/**/*.md: code
// blocks, and code spans of prose starting with "byoc ") names commands
// the CLI has, naming the page and line of any that does not (the docs
// check, `make check-docs`).
func TestDocsCommandsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := docscheck.Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	tree := toTree(commandTree())
	n := 0
	for _, p := range pages {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range docscheck.Commands(string(b)) {
			n++
			if msg := tree.Check(c); msg != "" {
				t.Errorf("%s:%d: %s", p, c.Line, msg)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d byoc command lines found in the docs: is the parser broken?", n)
	}
}

// TestDocsSubcommandListsComplete checks that where a guide lists a
// command's subcommands as alternatives (`byoc install create|list|...`),
// none is missing.
func TestDocsSubcommandListsComplete(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := docscheck.Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	tree := commandTree()
	bracket := regexp.MustCompile(`\[[^\]]*\]`)
	n := 0
	for _, p := range pages {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		spans := strings.Split(string(b), "`")
		for i := 1; i < len(spans); i += 2 {
			words := strings.Fields(spans[i])
			if len(words) < 2 || words[0] != "byoc" {
				continue
			}
			cmd, rest := tree, words[1:]
			for len(rest) > 0 && !strings.Contains(rest[0], "|") {
				sub, _, err := cmd.Find(rest[:1])
				if err != nil || sub == cmd {
					break
				}
				cmd, rest = sub, rest[1:]
			}
			if len(rest) == 0 || !strings.Contains(rest[0], "|") || cmd == tree {
				continue
			}
			listed := map[string]bool{}
			for _, s := range strings.Split(bracket.ReplaceAllString(strings.Join(rest, " "), ""), "|") {
				if f := strings.Fields(s); len(f) > 0 {
					listed[f[0]] = true
				}
			}
			n++
			for _, sub := range cmd.Commands() {
				if !sub.Hidden && sub.Name() != "help" && !listed[sub.Name()] {
					t.Errorf("%s: `%s` lists %s's subcommands but not %s", p, strings.Join(words, " "), cmd.CommandPath(), sub.Name())
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("only %d subcommand lists found in the docs (context, app, install, ...): is the parser broken?", n)
	}
}
