package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/chartpack"
)

// agentd module push --kind helm puts the example's chart into the
// install registry under the digest its components name; a wrong kind or
// a digest instead of a tag is refused, saying so.
func TestModulePushHelm(t *testing.T) {
	chart, _ := filepath.Abs(filepath.Join("..", "schema", "app", "load", "example", "charts", "api"))
	c, err := chartpack.Pack(chart)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := moduleCmd(context.Background(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := run("push", "--kind", "helm", "--state-dir", state, chart, "charts/api:0.1.0"); code != 0 || out != "charts/api:0.1.0 "+c.Digest().String()+"\n" {
		t.Fatalf("push: exit %d, %q %q; want the digest %s", code, out, errOut, c.Digest())
	}
	if code, _, errOut := run("push", "--kind", "docker", "--state-dir", state, chart, "charts/api:0.1.0"); code != 2 || !strings.Contains(errOut, `--kind must be terraform or helm, got "docker"`) {
		t.Errorf("--kind docker: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run("push", "--kind", "helm", "--state-dir", state, chart, "charts/api@"+c.Digest().String()); code != 1 || !strings.Contains(errOut, "give REPO:TAG") {
		t.Errorf("a digest: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run("push", "--kind", "helm", "--state-dir", state, t.TempDir(), "charts/x:1"); code != 1 || !strings.Contains(errOut, "is not a chart") {
		t.Errorf("no Chart.yaml: exit %d, %q", code, errOut)
	}
}
