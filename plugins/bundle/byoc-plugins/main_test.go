package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/bundle"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// The types this binary serves are exactly those agentd sends to it.
func TestServesTheBundledTypes(t *testing.T) {
	if got := names(); !slices.Equal(got, bundle.Types()) {
		t.Errorf("byoc-plugins serves %q, agentd bundles %q: keep types and bundle.Types the same", got, bundle.Types())
	}
	for _, typ := range bundle.Types() {
		if d, err := types[typ]().Describe(t.Context(), &sdk.DescribeRequest{}); err != nil || d.Type != typ {
			t.Errorf("types[%q] describes itself as %+v, %v", typ, d, err)
		}
	}
}

func TestCommandLine(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--types"}, &out, &errb); code != 0 || out.String() != strings.Join(bundle.Types(), "\n")+"\n" {
		t.Errorf("--types: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "byoc-plugins ") {
		t.Errorf("--version: exit %d, %q", code, out.String())
	}
	for _, args := range [][]string{nil, {"action"}, {"nope"}} {
		errb.Reset()
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "types: "+strings.Join(bundle.Types(), ", ")) {
			t.Errorf("%q: exit %d, %q", args, code, errb.String())
		}
	}
}

// --check-kubernetes with no kubeconfig outside a pod names the flag.
func TestCheckKubernetesNoKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	var out, errb bytes.Buffer
	if code := run([]string{"--check-kubernetes"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "agentd with --kubeconfig") {
		t.Errorf("--check-kubernetes: exit %d, %q", code, errb.String())
	}
}
