package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command a person runs shows examples in its --help, and every
// example line is a command line the CLI accepts: its commands exist and
// its flags are the command's (issue 33, item 11).
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			walk(s)
		}
		path := c.CommandPath()
		// Groups print their subcommands; help and completion are cobra's.
		if !c.Runnable() || c.Hidden || (c.HasSubCommands() && c.HasParent()) ||
			strings.HasPrefix(path, "byoc help") || strings.HasPrefix(path, "byoc completion") || strings.HasPrefix(path, "byoc __") {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s: no Example (add one to examples in examples.go)", path)
			return
		}
		for _, line := range strings.Split(c.Example, "\n") {
			words, err := shellWords(line)
			if err != nil {
				t.Errorf("%s: example %q: %v", path, line, err)
				continue
			}
			if i := indexOf(words, "byoc"); i >= 0 {
				words = words[i:]
			} else {
				continue // another program (a pipe's writer)
			}
			if cut := indexOf(words, "&&"); cut >= 0 {
				words = words[:cut]
			}
			n++
			checkCommandLine(t, path, line, words[1:])
		}
	}
	walk(commandTree())
	if n < 60 {
		t.Errorf("only %d example lines: is the walk broken?", n)
	}
}

// checkCommandLine checks that args (without "byoc") name a command and
// parse as its flags.
func checkCommandLine(t *testing.T, path, line string, args []string) {
	t.Helper()
	root := commandTree()
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Errorf("%s: example %q: %v", path, line, err)
		return
	}
	if len(args) > 0 && cmd == root && !strings.HasPrefix(args[0], "-") {
		t.Errorf("%s: example %q: no command %q", path, line, args[0])
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: example %q: %v", path, line, err)
	}
}

func indexOf(words []string, w string) int {
	for i, x := range words {
		if x == w {
			return i
		}
	}
	return -1
}

// shellWords splits a line of an example into words as a POSIX shell
// would for the quoting examples use ('...', "...", \x), stopping at a
// comment (#) or a pipe (|, whose right side is not checked).
func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				return nil, errString("unterminated quote")
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case (c == '#' || c == '|') && !inWord:
			if c == '|' && indexOf(words, "byoc") < 0 {
				// The pipe's writer is another program: check its reader.
				words = nil
				continue
			}
			return words, nil
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
