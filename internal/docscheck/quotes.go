package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// QuoteMarker, on the line before a fenced code block, says the block is
// the whole of a file of the repository (a path from its root) that CI
// compiles and tests: <!-- quote: plugins/examples/greeting/main.go -->.
const QuoteMarker = "<!-- quote: "

// quotedDirs are the docs directories whose Go examples must all quote a
// compiled file.
var quotedDirs = []string{"docs/plugin-author/"}

// CheckQuotes checks that every code block marked with QuoteMarker is the
// file it names, byte for byte, and that every Go block of a page in
// quotedDirs is marked: so the examples a reader copies are the ones CI
// builds and tests.
func CheckQuotes(root string) ([]Problem, error) {
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
		lines := strings.Split(string(b), "\n")
		mustQuote := false
		for _, d := range quotedDirs {
			mustQuote = mustQuote || strings.HasPrefix(p, d)
		}
		for i := 0; i < len(lines); i++ {
			fence, ok := strings.CutPrefix(lines[i], "```")
			if !ok {
				continue
			}
			end := i + 1
			for end < len(lines) && !strings.HasPrefix(lines[end], "```") {
				end++
			}
			marker := ""
			if i > 0 {
				marker, _ = strings.CutPrefix(strings.TrimSpace(lines[i-1]), QuoteMarker)
				marker = strings.TrimSpace(strings.TrimSuffix(marker, "-->"))
			}
			switch {
			case marker != "" && marker != strings.TrimSpace(lines[i-1]):
				want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(marker)))
				if err != nil {
					out = append(out, Problem{p, i + 1, fmt.Sprintf("quote of %s: %v", marker, err)})
				} else if got := strings.Join(lines[i+1:end], "\n") + "\n"; got != string(want) {
					out = append(out, Problem{p, i + 1, fmt.Sprintf("the block is not %s as it is now: copy the file into it again", marker)})
				}
			case mustQuote && fence == "go":
				out = append(out, Problem{p, i + 1, "a Go example here must quote a file CI compiles: put it in plugins/examples/ and mark the block with " + QuoteMarker + "PATH -->"})
			}
			i = end
		}
	}
	return out, nil
}
