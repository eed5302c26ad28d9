package operatorapi

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Every deployed artifact kind is listed with the verdict on its digest;
// a verification of another digest leaves it "not verified" and is
// listed apart, not deployed; a component deploying nothing by digest
// (module_dir) or of another type is not listed; rows sort by component,
// what it runs first.
func TestInstallArtifacts(t *testing.T) {
	comps := []store.InstallComponent{
		{Name: "web", ComponentType: "image", Config: []byte(`{"source":"hello@sha256:aa"}`)},
		{Name: "net", ComponentType: "terraform", Config: []byte(`{"module":"modules/network@sha256:bb"}`)},
		{Name: "dev", ComponentType: "terraform", Config: []byte(`{"module_dir":"/src"}`)},
		{Name: "setup", ComponentType: "action", Config: []byte(`{"steps":[]}`)},
		{Name: "plain", ComponentType: "image", Config: []byte(`{"source":"plain@sha256:ee"}`)},
	}
	verified := map[string]store.ArtifactVerification{
		"web": {Artifact: "hello@sha256:aa", Digest: "sha256:aa", KeyID: "k1", Verdict: "verified", JobID: "j1"},
		// A new digest of net refused: net still runs sha256:bb.
		"net": {Artifact: "modules/network@sha256:cc", Digest: "sha256:cc", Verdict: "refused", JobID: "j2",
			Failed: []string{"require-signature: it has no signature", "require-attestation sbom: no SBOM attestation"}},
		// A chart refused on a first deploy.
		"api": {Artifact: "charts/api@sha256:dd", Digest: "sha256:dd", Verdict: "warned", JobID: "j3", Failed: []string{"require-signature: x"}},
	}
	types := map[string]string{"j2": "terraform", "j3": "helm"}
	out, err := installArtifacts(comps, verified, func(id string) (string, error) { return types[id], nil })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range out {
		got = append(got, fmt.Sprintf("%s %s %s %s %v %v key=%s", a.Component, a.Kind, a.Digest, a.State, a.Deployed, a.Rules, a.GetVerification().GetKeyId()))
	}
	want := []string{
		"api chart sha256:dd warned false [require-signature] key=",
		"net module sha256:bb not verified true [] key=",
		"net module sha256:cc refused false [require-signature require-attestation sbom] key=",
		"plain image sha256:ee not verified true [] key=",
		"web image sha256:aa verified true [] key=k1",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if _, err := installArtifacts(nil, verified, func(string) (string, error) { return "", fmt.Errorf("db down") }); err == nil {
		t.Fatal("a store error was swallowed")
	}
}

// The plugin releases an install's agents report pinned are listed as
// kind plugin: an installed release verified with the key that signed
// it and when, a refused one refused with the agent's reason (not
// deployed), one pinned but not installed yet not verified; a revoked
// agent's are not; --kind plugin keeps them alone and --kind image drops
// them.
func TestInstallArtifactsPluginReleases(t *testing.T) {
	at := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	agents := []store.Agent{
		{ID: "ag-1", Plugins: &store.PluginReport{Releases: []store.PluginRelease{
			{Type: "greeting", Release: "10.0.3.7:5000/plugins/greeting@sha256:9a", Version: "0.2.0", Verdict: "verified", KeyID: "3b1f", CheckedAt: at},
			{Type: "cache", Release: "10.0.3.7:5000/plugins/cache@sha256:77", Verdict: "refused", CheckedAt: at,
				Reason: "plugin cache 0.3.0 (sha256:77): no signature by a trusted key (trusted: keys 3b1f); its signatures: key 0c42 (not trusted)"},
			{Type: "queue", Release: "10.0.3.7:5000/plugins/queue@sha256:55"},
		}}},
		{ID: "ag-old", RevokedAt: at, Plugins: &store.PluginReport{Releases: []store.PluginRelease{
			{Type: "greeting", Release: "10.0.3.7:5000/plugins/greeting@sha256:01", Verdict: "verified"}}}},
		{ID: "ag-2"}, // an older agentd: no report
	}
	comps := []store.InstallComponent{{Name: "web", ComponentType: "image", Config: []byte(`{"source":"hello@sha256:aa"}`)}}
	out, err := installArtifacts(comps, nil, func(string) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, pluginArtifacts(agents)...)
	var got []string
	for _, a := range out {
		v := a.GetVerification()
		got = append(got, fmt.Sprintf("%s/%s %s %s %s %s %s %v %v key=%s at=%v agent=%s", a.Component, a.ComponentType, a.Kind, a.Reference, a.Version, a.Digest,
			a.State, a.Deployed, a.Rules, v.GetKeyId(), v.GetVerifyTime().AsTime().Equal(at), a.AgentId))
	}
	want := []string{
		"web/image image hello@sha256:aa  sha256:aa not verified true [] key= at=false agent=",
		"/cache plugin 10.0.3.7:5000/plugins/cache@sha256:77  sha256:77 refused false [release] key= at=true agent=ag-1",
		"/greeting plugin 10.0.3.7:5000/plugins/greeting@sha256:9a 0.2.0 sha256:9a verified true [] key=3b1f at=true agent=ag-1",
		"/queue plugin 10.0.3.7:5000/plugins/queue@sha256:55  sha256:55 not verified false [] key= at=false agent=ag-1",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if f := out[1].GetVerification().GetFailed(); len(f) != 1 || !strings.HasPrefix(f[0], "release: plugin cache 0.3.0 (sha256:77): no signature by a trusted key") {
		t.Fatalf("the refusal's reason: %q", f)
	}
	if err := checkArtifactKind("plugin"); err != nil {
		t.Fatal(err)
	}
	if err := checkArtifactKind("plugins"); err == nil || !strings.Contains(err.Error(), "image, chart, module or plugin") {
		t.Fatalf("--kind plugins: %v", err)
	}
	plugins := keepKind(slices.Clone(out), KindPlugin)
	if len(plugins) != 3 || slices.ContainsFunc(plugins, func(a *imsv1.InstallArtifact) bool { return a.Kind != KindPlugin }) {
		t.Fatalf("--kind plugin kept %v", plugins)
	}
	if images := keepKind(slices.Clone(out), "image"); len(images) != 1 || images[0].Component != "web" {
		t.Fatalf("--kind image kept %v", images)
	}
}

// The history lists each verification on record, newest first, none
// deployed: a component's with its kind from its type and its rules, a
// plugin release's as kind plugin, a refusal with rule release and the
// agent's reason.
func TestInstallArtifactsHistory(t *testing.T) {
	at := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	h := []store.VerificationRecord{
		{ComponentType: "greeting", AgentID: "ag-1", Version: "0.2.0", ArtifactVerification: store.ArtifactVerification{
			Artifact: "reg/plugins/greeting@sha256:9a", Digest: "sha256:9a", KeyID: "3b1f", Verdict: "verified", VerifiedAt: at.Add(time.Hour)}},
		{ComponentType: "greeting", AgentID: "ag-1", ArtifactVerification: store.ArtifactVerification{
			Artifact: "reg/plugins/greeting@sha256:77", Digest: "sha256:77", Verdict: "refused", Failed: []string{"no signature by a trusted key"}, VerifiedAt: at}},
		{Component: "net", ComponentType: "terraform", ArtifactVerification: store.ArtifactVerification{
			Artifact: "modules/net@sha256:cc", Digest: "sha256:cc", Verdict: "refused", JobID: "j2", Failed: []string{"require-signature: none"}, VerifiedAt: at}},
	}
	out := keepKind(historyArtifacts(h), "")
	var got []string
	for _, a := range out {
		got = append(got, fmt.Sprintf("%s/%s %s %s %s %v %v %q %s", a.Component, a.ComponentType, a.Kind, a.Reference, a.State, a.Deployed, a.Rules,
			a.GetVerification().GetFailed(), a.GetVerification().GetJobId()))
	}
	want := []string{
		`/greeting plugin reg/plugins/greeting@sha256:9a verified false [] [] `,
		`/greeting plugin reg/plugins/greeting@sha256:77 refused false [release] ["release: no signature by a trusted key"] `,
		`net/terraform module modules/net@sha256:cc refused false [require-signature] ["require-signature: none"] j2`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if p := keepKind(historyArtifacts(h), KindPlugin); len(p) != 2 {
		t.Fatalf("--history --kind plugin: %v", p)
	}
}
