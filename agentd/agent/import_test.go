package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// importer adopts the id it is given: it keeps it (and the config's keys
// it saw) in the component's state directory.
type importer struct{ planner }

func (importer) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "importer", Version: "1"}, nil
}
func (importer) Import(_ context.Context, req *sdk.ImportRequest) (*sdk.ImportResponse, error) {
	_, leaked := req.Config["import_id"]
	text := fmt.Sprintf("id=%s leaked=%v", req.ID, leaked)
	return &sdk.ImportResponse{Outputs: map[string]string{"id": req.ID}},
		os.WriteFile(filepath.Join(req.Job.StateDir, "imported"), []byte(text), 0o600)
}

// An import job hands the plugin the import id the config carried (the
// key itself taken out) with the component's state directory; a type
// without the import capability is refused with its name, and no other
// operation may carry an import id.
func TestImportJob(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stateRoot := t.TempDir()
	r := &agent.PluginRunner{Loader: &pluginhost.Loader{SelfExe: self, Builtins: []string{"importer", "remover"}},
		WorkRoot: t.TempDir(), StateRoot: stateRoot}
	t.Cleanup(func() { r.Close() })
	run := func(typ, id, op string, config map[string]any) (agent.Outcome, string) {
		t.Helper()
		var l logs
		out := r.Run(t.Context(), agent.Job{ID: id, InstallID: "ins1", Attempt: 1, ComponentType: typ, Component: "files",
			Operation: op, Config: config, Timeout: time.Minute, Mode: "provision"},
			func(stream int32, text string) { l.add(stream, text) })
		return out, l.String()
	}
	out, log := run("importer", "job1", sdk.OpImport, map[string]any{"import_id": "/srv/app.env", "path": "/srv/app.env"})
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || out.Outputs["id"] != "/srv/app.env" || !strings.Contains(log, `importing "/srv/app.env" as component files`) {
		t.Fatalf("import: %v %q %v\n%s", out.Outcome, out.Error, out.Outputs, log)
	}
	if b, err := os.ReadFile(filepath.Join(stateRoot, "files", "imported")); err != nil || string(b) != "id=/srv/app.env leaked=false" {
		t.Fatalf("the plugin saw %q (%v)", b, err)
	}
	for _, tc := range []struct {
		typ, op string
		config  map[string]any
		want    string
	}{
		{"remover", sdk.OpImport, map[string]any{"import_id": "x"}, `component type "remover" does not implement import`},
		{"importer", sdk.OpImport, map[string]any{}, "an import job carries no import id (config.import_id)"},
		{"importer", sdk.OpImport, map[string]any{"import_id": 3.0}, "config.import_id: must be a non-empty string"},
		{"importer", sdk.OpApply, map[string]any{"import_id": "x"}, "a apply job carries an import id; only an import can"},
	} {
		out, log := run(tc.typ, "job-"+tc.typ+tc.op, tc.op, tc.config)
		if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, tc.want) {
			t.Errorf("%s %s %v: %v %q, want %q\n%s", tc.typ, tc.op, tc.config, out.Outcome, out.Error, tc.want, log)
		}
	}
}
