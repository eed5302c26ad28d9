package console

import (
	"testing"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The install view shows every artifact its components deploy (images,
// charts, modules) with the agent's verdict on each under the customer's
// supply-chain policy (STATE), a refusal's first rule beside it, and
// leaves the section out while there is none.
func TestInstallViewShowsArtifactsVerified(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(200, 60))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	feedInstallParts(m)
	m.Update(artifactsMsg{gen: v.artifactsGen})
	mustNotContain(t, screen(m), "ARTIFACTS")
	m.Update(artifactsMsg{gen: v.artifactsGen, artifacts: []*imsv1.InstallArtifact{
		{Component: "web", Kind: "image", Reference: "hello@sha256:aa", Deployed: true, State: "verified", Verification: &imsv1.ArtifactVerification{
			Verdict: "verified", KeyId: "k-3b1f", Attestations: []string{"https://slsa.dev/provenance/v1"}}},
		{Component: "net", Kind: "module", Reference: "modules/network@sha256:dd", Deployed: true, State: "not verified"},
		{Component: "api", Kind: "chart", Reference: "charts/api@sha256:bb", State: "refused", Rules: []string{"require-signature"}, Verification: &imsv1.ArtifactVerification{
			Verdict: "refused", Failed: []string{"require-signature: it has no signature\x1b[2J"}}},
	}})
	s := screen(m)
	for _, want := range [][]string{
		{"ARTIFACTS", "STATE"},
		{"web", "image", "VERIFIED key k-3b1f, 1 attestations", "hello@sha256:aa"},
		{"net", "module", "NOT VERIFIED", "modules/network@sha256:dd"},
		{"api", "chart", "REFUSED", "charts/api@sha256:bb (not deployed)", "require-signature: it has no signature"},
	} {
		if !screenLine(s, want...) {
			t.Errorf("no line with %q:\n%s", want, s)
		}
	}
	mustNotContain(t, s, "\x1b[2J")
	m.Update(artifactsMsg{gen: v.artifactsGen - 1, artifacts: []*imsv1.InstallArtifact{{Component: "stale"}}})
	mustNotContain(t, screen(m), "stale")
}
