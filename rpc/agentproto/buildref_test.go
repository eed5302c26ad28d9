package agentproto

import (
	"strings"
	"testing"
)

func TestParseBuildRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct{ in, repo, err string }{
		{in: "web@" + d, repo: "web"},
		{in: "acme/web-app@" + d, repo: "acme/web-app"},
		{in: "web:1.2", err: "is a tag"},
		{in: "web:latest", err: "is a tag"},
		{in: "web", err: "want REPOSITORY@sha256"},
		{in: "localhost:5000/web@" + d, err: `names registry "localhost:5000"`},
		{in: "localhost/web@" + d, err: `names registry "localhost"`},
		{in: "evil.example/web@" + d, err: `names registry "evil.example"`},
		{in: "oci:/tmp/x/web@" + d, err: "is an OCI layout"},
		{in: "acme/web.app@" + d, repo: "acme/web.app"},
		{in: "web@sha256:abc", err: "want REPOSITORY@sha256"},
		{in: "Web@" + d, err: "want REPOSITORY@sha256"},
		{in: "web:1@" + d, err: "want REPOSITORY@sha256"},
	} {
		repo, digest, err := ParseBuildRef(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseBuildRef(%q) = %q, %v; want error with %q", tc.in, repo, err, tc.err)
			}
			continue
		}
		if err != nil || repo != tc.repo || digest != d {
			t.Errorf("ParseBuildRef(%q) = %q, %q, %v", tc.in, repo, digest, err)
		}
	}
}
