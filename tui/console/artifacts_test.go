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

// artifactsFixture is an install's image and the plugin releases its
// agent pinned: one verified, one refused.
func artifactsFixture() []*imsv1.InstallArtifact {
	return []*imsv1.InstallArtifact{
		{Component: "web", ComponentType: "image", Kind: "image", Reference: "hello@sha256:aa", Deployed: true, State: "verified",
			Verification: &imsv1.ArtifactVerification{Verdict: "verified", KeyId: "k-3b1f"}},
		{ComponentType: "cache", Kind: "plugin", Reference: "10.0.3.7:5000/plugins/cache@sha256:77", State: "refused", Rules: []string{"release"},
			AgentId: "agt_1", Verification: &imsv1.ArtifactVerification{Verdict: "refused",
				Failed: []string{"release: plugin cache 0.3.0 (sha256:77): no signature by a trusted key"}}},
		{ComponentType: "greeting", Kind: "plugin", Reference: "10.0.3.7:5000/plugins/greeting@sha256:9a", Version: "0.2.0", Deployed: true,
			State: "verified", AgentId: "agt_1", Verification: &imsv1.ArtifactVerification{Verdict: "verified", KeyId: "3b1f"}},
	}
}

// The ARTIFACTS section lists the plugin releases the install's agent
// pinned, by type, with their version and the agent's verdict; a refused
// one is not deployed and shows its reason.
func TestInstallViewShowsPluginReleases(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(200, 60))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	feedInstallParts(m)
	m.Update(artifactsMsg{gen: v.artifactsGen, artifacts: artifactsFixture()})
	s := screen(m)
	for _, want := range [][]string{
		{"type greeting", "plugin", "VERIFIED key 3b1f", "10.0.3.7:5000/plugins/greeting@sha256:9a 0.2.0"},
		{"type cache", "plugin", "REFUSED", "10.0.3.7:5000/plugins/cache@sha256:77 (not deployed)", "release: plugin cache 0.3.0 (sha256:77): no signature"},
	} {
		if !screenLine(s, want...) {
			t.Errorf("no line with %q:\n%s", want, s)
		}
	}
}
