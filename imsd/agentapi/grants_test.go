package agentapi

import (
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/imsd/store"
)

// Which jobs get a registry grant, for what: an install's image plan or
// apply pulls its source's repository; a build job of the vendor install
// pulls and pushes its repository; nothing else gets one.
func TestGrantScopes(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, install, typ, op, config, want string
	}{
		{"image apply", "ins_1", "image", "apply", `{"source":"acme/web@` + d + `"}`, "repository:acme/web:pull"},
		{"image plan", "ins_1", "image", "plan", `{"source":"acme/web@` + d + `"}`, "repository:acme/web:pull"},
		{"image drift", "ins_1", "image", "drift", `{"source":"acme/web@` + d + `"}`, ""},
		{"image destroy", "ins_1", "image", "destroy", `{"source":"acme/web@` + d + `"}`, ""},
		{"image by tag", "ins_1", "image", "apply", `{"source":"acme/web:1.0"}`, ""},
		{"image with a host", "ins_1", "image", "apply", `{"source":"evil.example/web@` + d + `"}`, ""},
		{"image of the vendor install", store.VendorInstallID, "image", "apply", `{"source":"acme/web@` + d + `"}`, ""},
		{"build", store.VendorInstallID, "build", "apply", `{"repository":"acme/web"}`, "repository:acme/web:pull,push"},
		{"build of an install", "ins_1", "build", "apply", `{"repository":"acme/web"}`, ""},
		{"build of a bad repository", store.VendorInstallID, "build", "apply", `{"repository":"Acme"}`, ""},
		{"action", "ins_1", "action", "apply", `{}`, ""},
		{"bad config", "ins_1", "image", "apply", `{`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(grantScopes(tc.install, tc.typ, tc.op, []byte(tc.config)), " "); got != tc.want {
				t.Fatalf("grantScopes = %q, want %q", got, tc.want)
			}
		})
	}
}
