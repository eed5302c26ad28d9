package demoimage

import (
	"os"
	"strings"
	"testing"
)

// The digest is pinned: a change to the image's bytes is a change to the
// example app too (byoc app init's components/web.toml names it).
func TestDigestIsPinnedByTheExampleApp(t *testing.T) {
	const want = "sha256:a355a3bd6be0505df036e787aa115579bf476e7602400f709f9b7c776d6c8f33"
	d := Digest().String()
	if d != want {
		t.Errorf("demo image digest %s, want %s (update this test and schema/app/load/example/components/web.toml together)", d, want)
	}
	b, err := os.ReadFile("../../schema/app/load/example/components/web.toml")
	if err != nil {
		t.Fatal(err)
	}
	if ref := `source = "` + Repository + "@" + d + `"`; !strings.Contains(string(b), ref) {
		t.Errorf("the example app's web.toml does not name the demo image: want %s in\n%s", ref, b)
	}
	_, b1, _ := Blobs()
	_, b2, _ := Blobs()
	for d, b := range b1 {
		if string(b2[d]) != string(b) {
			t.Errorf("two packings differ at %s", d)
		}
	}
}
