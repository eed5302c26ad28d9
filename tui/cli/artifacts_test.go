package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// ListInstallArtifacts answers an image and two plugin releases (one
// verified, one refused), keeping the request's kind.
func (f *fakeOperator) ListInstallArtifacts(ctx context.Context, req *connect.Request[imsv1.ListInstallArtifactsRequest]) (*connect.Response[imsv1.ListInstallArtifactsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	at := timestamppb.New(time.Now().Add(-2 * time.Hour))
	all := []*imsv1.InstallArtifact{
		{Component: "web", ComponentType: "image", Kind: "image", Reference: "hello@sha256:aaaaaaaaaaaaaaaaaaaa", Digest: "sha256:aaaaaaaaaaaaaaaaaaaa",
			State: "verified", Deployed: true, Verification: &imsv1.ArtifactVerification{KeyId: "k1", JobId: "job_1", Verdict: "verified", VerifyTime: at}},
		{ComponentType: "cache", Kind: "plugin", Reference: "10.0.3.7:5000/plugins/cache@sha256:7777777777777777", Digest: "sha256:7777777777777777",
			State: "refused", Rules: []string{"release"}, AgentId: "agt_1", Verification: &imsv1.ArtifactVerification{Verdict: "refused", VerifyTime: at,
				Failed: []string{"release: plugin cache 0.3.0 (sha256:7777): no signature by a trusted key"}}},
		{ComponentType: "greeting", Kind: "plugin", Reference: "10.0.3.7:5000/plugins/greeting@sha256:9a9a9a9a9a9a9a9a", Digest: "sha256:9a9a9a9a9a9a9a9a",
			Version: "0.2.0", State: "verified", Deployed: true, AgentId: "agt_1", Verification: &imsv1.ArtifactVerification{KeyId: "3b1f", Verdict: "verified", VerifyTime: at}},
	}
	if req.Msg.History {
		old := timestamppb.New(time.Now().Add(-26 * time.Hour))
		all = []*imsv1.InstallArtifact{all[2], {ComponentType: "greeting", Kind: "plugin", Reference: "10.0.3.7:5000/plugins/greeting@sha256:0101010101010101",
			Digest: "sha256:0101010101010101", Version: "0.1.0", State: "verified", AgentId: "agt_1", Verification: &imsv1.ArtifactVerification{KeyId: "3b1f", Verdict: "verified", VerifyTime: old}}}
		all[0].Deployed = false
	}
	out := &imsv1.ListInstallArtifactsResponse{}
	for _, a := range all {
		if k := req.Msg.Kind; k == "" || a.Kind == k {
			out.Artifacts = append(out.Artifacts, a)
		}
	}
	return connect.NewResponse(out), nil
}

// byoc install artifacts lists plugin releases as kind plugin, by type,
// with their version, verdict, key and check time; --kind plugin keeps
// them; -o wide names the agent; -o json carries the refusal's reason.
func TestInstallArtifactsPluginReleases(t *testing.T) {
	setup(t)
	r := mustRun(t, "install", "artifacts", "shop-acme")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("install artifacts:\n%s", r.stdout)
	}
	for i, want := range [][]string{
		{"COMPONENT", "KIND", "ARTIFACT", "STATE", "RULE", "KEY", "VERIFIED"},
		{"web", "image", "hello", "verified", "k1", "2h ago"},
		{"type cache", "plugin", "10.0.3.7:5000/plugins/cache (not deployed)", "refused", "release", "2h ago"},
		{"type greeting", "plugin", "10.0.3.7:5000/plugins/greeting 0.2.0", "verified", "3b1f", "2h ago"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d lacks %q:\n%s", i, w, r.stdout)
			}
		}
	}

	r = mustRun(t, "install", "artifacts", "shop-acme", "--kind", "plugin", "-o", "wide")
	if strings.Contains(r.stdout, "hello") || strings.Count(r.stdout, "agent agt_1") != 2 {
		t.Errorf("install artifacts --kind plugin -o wide:\n%s", r.stdout)
	}

	r = mustRun(t, "install", "artifacts", "shop-acme", "--kind", "plugin", "-o", "json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
	if len(rows) != 2 || rows[0]["kind"] != "plugin" || rows[0]["state"] != "refused" || rows[1]["version"] != "0.2.0" ||
		!strings.Contains(r.stdout, "no signature by a trusted key") {
		t.Errorf("install artifacts --kind plugin -o json:\n%s", r.stdout)
	}

	// --history: every verification on record, newest first, none
	// marked not deployed.
	r = mustRun(t, "install", "artifacts", "shop-acme", "--history", "--kind", "plugin")
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "greeting 0.2.0") || !strings.Contains(lines[1], "2h ago") ||
		!strings.Contains(lines[2], "greeting 0.1.0") || !strings.Contains(lines[2], "1d2h ago") || strings.Contains(r.stdout, "not deployed") {
		t.Errorf("install artifacts --history:\n%s", r.stdout)
	}

	if r := byoc(t, "install", "artifacts", "shop-acme", "--kind", "plugins"); r.code == 0 || !strings.Contains(r.stderr, "image, chart, module or plugin") {
		t.Errorf("--kind plugins: exit %d\n%s", r.code, r.stderr)
	}
}
