package console

import (
	"testing"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The install view shows its image components with what the agent
// verified of each under the customer's supply-chain policy (VERIFIED),
// a refusal's first rule beside it, and leaves the section out while
// there is none.
func TestInstallViewShowsImagesVerified(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(200, 60))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	feedInstallParts(m)
	m.Update(imagesMsg{gen: v.imagesGen})
	mustNotContain(t, screen(m), "IMAGES")
	m.Update(imagesMsg{gen: v.imagesGen, images: []*imsv1.InstallImage{
		{Component: "web", InstallReference: "reg.acme/hello@sha256:aa", Verification: &imsv1.ArtifactVerification{
			Verdict: "verified", KeyId: "k-3b1f", Attestations: []string{"https://slsa.dev/provenance/v1"}}},
		{Component: "rogue", VendorReference: "rogue@sha256:bb", Verification: &imsv1.ArtifactVerification{
			Verdict: "refused", Failed: []string{"require-signature: it has no signature\x1b[2J"}}},
		{Component: "plain", InstallReference: "reg.acme/plain@sha256:cc"},
	}})
	s := screen(m)
	for _, want := range [][]string{
		{"IMAGES", "VERIFIED"},
		{"web", "VERIFIED key k-3b1f, 1 attestations", "reg.acme/hello@sha256:aa"},
		{"rogue", "REFUSED", "rogue@sha256:bb", "require-signature: it has no signature"},
		{"plain", "-", "reg.acme/plain@sha256:cc"},
	} {
		if !screenLine(s, want...) {
			t.Errorf("no line with %q:\n%s", want, s)
		}
	}
	mustNotContain(t, s, "\x1b[2J")
	m.Update(imagesMsg{gen: v.imagesGen - 1, images: []*imsv1.InstallImage{{Component: "stale"}}})
	mustNotContain(t, screen(m), "stale")
}
