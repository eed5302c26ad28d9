package docscheck

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository this package lives in.
const repoRoot = "../.."

// TestDocs checks that every relative link of README.md,
// ARCHITECTURE.md, plugins/README.md and docs/**/*.md resolves, anchors
// included, that no page is over 600 lines (the README over 300), and
// that every quoted code block is its file (CheckQuotes).
func TestDocs(t *testing.T) {
	for name, check := range map[string]func(string) ([]Problem, error){"links": CheckLinks, "lengths": CheckLengths, "quotes": CheckQuotes} {
		t.Run(name, func(t *testing.T) {
			problems, err := check(repoRoot)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

// TestPagesFound guards the checks above against passing on nothing.
func TestPagesFound(t *testing.T) {
	pages, err := Pages(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "ARCHITECTURE.md", "docs/README.md", "docs/customer/README.md", "docs/operator/README.md"} {
		if !slices.Contains(pages, want) {
			t.Errorf("Pages does not list %s (got %v)", want, pages)
		}
	}
}

func write(t *testing.T, root, name, text string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckLinksFindsBrokenLinks plants broken links of every kind and
// checks each is reported at its file and line, and that good ones are
// not.
func TestCheckLinksFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write(t, root, "README.md", strings.Join([]string{
		"# byoc",
		"See [the guide](docs/guide.md) and [its part](docs/guide.md#the-part).", // good
		"A [missing page](docs/nope.md).",                                        // 3
		"A [missing anchor](docs/guide.md#no-such-part).",                        // 4
		"[Up here](#byoc), [down](#nowhere).",                                    // 5
		"`[not a link](nope.md)` and a [web link](https://example.com/x.md).",
		"[ref]: docs/also-missing.md", // 7
		"A span `across a",
		"line [not a link](nope.md)` then [a link](nope2.md).", // 9
		"",
	}, "\n"))
	write(t, root, "docs/guide.md", strings.Join([]string{
		"# Guide",
		"",
		"## The part",
		"",
		"## The part",
		"",
		"```sh",
		"# not a heading",
		"[not a link](x.md)",
		"```",
		"Back [home](../README.md#byoc), [twice](#the-part-1), [code](#not-a-heading).", // 11
		"[Out](../../etc/passwd), [a dir](.), [root](/README.md).",                      // 12
	}, "\n"))
	problems, err := CheckLinks(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:3: link docs/nope.md: no file docs/nope.md",
		"README.md:4: link docs/guide.md#no-such-part: no heading with anchor #no-such-part in docs/guide.md",
		"README.md:5: link #nowhere: no heading with anchor #nowhere in README.md",
		"README.md:7: link docs/also-missing.md: no file docs/also-missing.md",
		"README.md:9: link nope2.md: no file nope2.md",
		"docs/guide.md:11: link #not-a-heading: no heading with anchor #not-a-heading in docs/guide.md",
		"docs/guide.md:12: link ../../etc/passwd: leaves the repository",
		"docs/guide.md:12: link /README.md: use a path relative to the page, not to the site root",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckLengths(t *testing.T) {
	root := t.TempDir()
	write(t, root, "README.md", strings.Repeat("x\n", 301))
	write(t, root, "docs/ok.md", strings.Repeat("x\n", 600))
	write(t, root, "docs/long.md", strings.Repeat("x\n", 601))
	problems, err := CheckLengths(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:301: 301 lines, over the 300 a page may have: split it by reader (docs/README.md)",
		"docs/long.md:601: 601 lines, over the 600 a page may have: split it by reader (docs/README.md)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Quick start: the example app, end to end": "quick-start-the-example-app-end-to-end",
		"The agent's copy":                         "the-agents-copy",
		"`rpc/`":                                   "rpc",
		"`e2e/` and `bench/`":                      "e2e-and-bench",
		"`scripts/`, `.ci/`, `tools/`":             "scripts-ci-tools",
		"The [linked](x.md) *part*":                "the-linked-part",
		"snake_case and UTF-8 – ok":                "snake_case-and-utf-8--ok",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCommands(t *testing.T) {
	text := strings.Join([]string{
		"Run `byoc install list|get` or `byoc` alone, not `byoc-plugins terraform`.", // 1
		"```sh",
		"bin/byoc app create shop   # a comment: byoc fake",            // 3
		"$ byoc job logs JOB --follow",                                 // 4
		"make build && byoc context add local --server http://x --use", // 5
		"# byoc in a comment",
		"echo \"$(byoc whoami -o json)\" | jq; byoc-plugins --types", // 7
		"FOO=1 byoc action run acme -- 'byoc in quotes'",             // 8
		"byoc instal list # mistyped on purpose " + IgnoreMarker,
		"```",
		"A span across lines: `byoc audit", // 11
		"verify --file F`, then `byoc instal`" + IgnoreMarker + " and `byoc job get`.",
	}, "\n")
	var got []string
	for _, c := range Commands(text) {
		var words []string
		for _, w := range c.Words {
			words = append(words, strings.Join(w, "|"))
		}
		got = append(got, strings.Join(append([]string{strconv.Itoa(c.Line)}, words...), " "))
	}
	want := []string{
		"1 install list|get",
		"3 app create shop",
		"4 job logs",
		"5 context add local",
		"7 whoami",
		"8 action run acme",
		"11 audit verify",
		"12 job get",
	}
	if !slices.Equal(got, want) {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTreeCheck(t *testing.T) {
	tree := &Tree{Name: "byoc", Subs: []*Tree{
		{Name: "install", Subs: []*Tree{{Name: "list", Aliases: []string{"ls"}}, {Name: "get"}}},
		{Name: "whoami"},
	}}
	for _, tc := range []struct {
		words [][]string
		want  string
	}{
		{[][]string{{"install"}, {"ls"}}, ""},
		{[][]string{{"install"}, {"list", "get"}}, ""},
		{[][]string{{"whoami"}, {"extra"}}, ""},
		{[][]string{{"instal"}, {"list"}}, `"byoc x": "byoc" has no command "instal" (it has install, whoami)`},
		{[][]string{{"install"}, {"list", "drift"}}, `"byoc x": "byoc install" has no command "drift" (it has list, get)`},
	} {
		if got := tree.Check(Command{Text: "byoc x", Words: tc.words}); got != tc.want {
			t.Errorf("Check(%v) = %q, want %q", tc.words, got, tc.want)
		}
	}
}

// CheckQuotes finds a quote that is not its file and an unquoted Go
// example in docs/plugin-author.
func TestCheckQuotesFindsStaleExamples(t *testing.T) {
	root := t.TempDir()
	write(t, root, "plugins/examples/x/main.go", "package main\n\nfunc main() {}\n")
	write(t, root, "README.md", "# r\n")
	write(t, root, "docs/plugin-author/guide.md", "# g\n\n<!-- quote: plugins/examples/x/main.go -->\n```go\npackage main\n\nfunc main() {}\n```\n\n"+
		"<!-- quote: plugins/examples/x/main.go -->\n```go\npackage main\n```\n\n```go\nfmt.Println()\n```\n\n```sh\ngo test\n```\n")
	problems, err := CheckQuotes(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"docs/plugin-author/guide.md:11: the block is not plugins/examples/x/main.go as it is now: copy the file into it again",
		"docs/plugin-author/guide.md:15: a Go example here must quote a file CI compiles: put it in plugins/examples/ and mark the block with <!-- quote: PATH -->",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
