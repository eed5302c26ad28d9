package operatorapi

import (
	"fmt"
	"slices"
	"testing"

	"github.com/byoc-dev/byoc/imsd/store"
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
