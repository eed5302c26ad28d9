package load

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/schema/app/validate"
)

var update = flag.Bool("update", false, "rewrite the want sections of testdata/*.txtar")

// parseTxtar reads a txtar archive: "-- name --" lines start files.
func parseTxtar(data []byte) (comment string, files map[string][]byte, order []string) {
	files = map[string][]byte{}
	var cur string
	var buf bytes.Buffer
	flush := func() {
		if cur == "" {
			comment = buf.String()
		} else {
			files[cur] = bytes.Clone(buf.Bytes())
			order = append(order, cur)
		}
		buf.Reset()
	}
	for line := range strings.SplitAfterSeq(string(data), "\n") {
		t := strings.TrimRight(line, "\n")
		if strings.HasPrefix(t, "-- ") && strings.HasSuffix(t, " --") && len(t) > 6 {
			flush()
			cur = strings.TrimSpace(t[3 : len(t)-3])
			continue
		}
		buf.WriteString(line)
	}
	flush()
	return comment, files, order
}

func formatTxtar(comment string, files map[string][]byte, order []string) []byte {
	var b bytes.Buffer
	b.WriteString(comment)
	for _, n := range order {
		b.WriteString("-- " + n + " --\n")
		b.Write(files[n])
	}
	return b.Bytes()
}

// TestConfigErrors runs every testdata/*.txtar: the files of an app, and a
// "want" section with the exact error output (or "ok").
func TestConfigErrors(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.txtar")
	if len(paths) == 0 {
		t.Fatal("no test cases")
	}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".txtar"), func(t *testing.T) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			comment, files, order := parseTxtar(data)
			want, ok := files["want"]
			if !ok {
				t.Fatal("no want section")
			}
			app := map[string][]byte{}
			for n, b := range files {
				if n != "want" {
					app[n] = b
				}
			}
			got := "ok\n"
			if _, err := Parse(app, validate.Options{}); err != nil {
				got = err.Error() + "\n"
			}
			if *update {
				files["want"] = []byte(got)
				if err := os.WriteFile(p, formatTxtar(comment, files, order), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestExampleIsValid(t *testing.T) {
	a, err := Parse(ExampleFiles(), validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(a.Graph().Order(), " "); got != "sandbox cache db api web" {
		t.Errorf("order = %s", got)
	}
}

// A revision stored before the limits on a job config's shape and an
// input's size still parses when read again (validate.Options.Stored):
// its workflows, plans and diffs keep working; a new push is refused.
func TestStoredRevisionSkipsNewLimits(t *testing.T) {
	files := map[string][]byte{
		"app.toml":           []byte("name = \"acme\"\n"),
		"inputs.toml":        []byte("[[input]]\nname = \"cert\"\n"),
		"components/a.toml":  []byte("type = \"helm\"\n[config]\nchart = \"oci://r/c\"\nvalues = " + strings.Repeat("{ a = ", 120) + "{}" + strings.Repeat(" }", 120) + "\n"),
		"installs/prod.toml": []byte("inputs = { cert = \"" + strings.Repeat("c", 5000) + "\" }\n"),
	}
	if _, err := Parse(files, validate.Options{AnyType: true, Stored: true}); err != nil {
		t.Fatalf("a stored revision no longer parses: %v", err)
	}
	_, err := Parse(files, validate.Options{})
	if err == nil || !strings.Contains(err.Error(), "nested deeper than 100 levels") || !strings.Contains(err.Error(), "5000 bytes; at most 4096") {
		t.Fatalf("a new push past the limits: %v", err)
	}
}

// Every `agentd module push` that the example's comments show (what
// byoc app init writes) names the agent's --state-dir (or the registry),
// without which it fails (issue 33, item 10).
func TestExampleModulePushCommands(t *testing.T) {
	n := 0
	for p, b := range ExampleFiles() {
		if !strings.HasSuffix(p, ".toml") && !strings.HasSuffix(p, ".yaml") {
			continue
		}
		// Comments wrap: join their lines.
		text := strings.ReplaceAll(string(b), "\n# ", " ")
		for _, part := range strings.Split(text, "`")[1:] {
			if !strings.HasPrefix(part, "agentd module push") {
				continue
			}
			n++
			if !strings.Contains(part, "--state-dir") && !strings.Contains(part, "--install-registry") {
				t.Errorf("%s: `%s` names no --state-dir", p, part)
			}
		}
	}
	if n == 0 {
		t.Fatal("no agentd module push command found in the example")
	}
}
