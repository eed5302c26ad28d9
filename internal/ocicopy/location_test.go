package ocicopy_test

import (
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/ocicopy"
)

func TestParseRegistry(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: String(), or "error: substring"
		layout   bool
		plain    bool
	}{
		{in: "http://127.0.0.1:5000", want: "127.0.0.1:5000", plain: true},
		{in: "127.0.0.1:5000", want: "127.0.0.1:5000", plain: true},
		{in: "localhost:5000/team", want: "localhost:5000/team", plain: true},
		{in: "[::1]:5000", want: "[::1]:5000", plain: true},
		{in: "https://127.0.0.1:5000", want: "https://127.0.0.1:5000"},
		{in: "registry.example.com", want: "registry.example.com"},
		{in: "http://registry.example.com/a/b", want: "http://registry.example.com/a/b", plain: true},
		{in: "oci:/var/lib/byoc/registry", want: "oci:/var/lib/byoc/registry", layout: true},
		{in: "/var/lib/byoc/registry/", want: "oci:/var/lib/byoc/registry", layout: true},
		{in: "", want: "error: empty registry location"},
		{in: "oci:", want: "error: oci: names no directory"},
		{in: "ftp://x", want: `error: scheme "ftp": want http, https, oci: or none`},
		{in: "http://", want: "error: no host"},
		{in: "host:", want: `error: host "host:": empty port`},
		{in: "registry.example.com/Team", want: `error: path "Team" is not a valid repository prefix`},
	} {
		r, err := ocicopy.ParseRegistry(tc.in)
		if e, ok := strings.CutPrefix(tc.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), e) {
				t.Errorf("ParseRegistry(%q) = %v, %v; want an error with %q", tc.in, r, err, e)
			}
			continue
		}
		if err != nil || r.String() != tc.want || r.IsLayout() != tc.layout || r.PlainHTTP != tc.plain {
			t.Errorf("ParseRegistry(%q) = %+v (%s), %v; want %s (layout %v, plain HTTP %v)", tc.in, r, r, err, tc.want, tc.layout, tc.plain)
		}
	}
}

func TestParseReference(t *testing.T) {
	const d = "sha256:4f1c0e2d3b6a5f7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e"
	for _, tc := range []struct {
		in, repo, tag, digest, want string
	}{
		{in: "127.0.0.1:5000/acme/web@" + d, repo: "acme/web", digest: d, want: "127.0.0.1:5000/acme/web@" + d},
		{in: "registry.example.com/acme/web:1.4.0@" + d, repo: "acme/web", tag: "1.4.0", digest: d},
		{in: "registry.example.com/acme/web:1.4.0", repo: "acme/web", tag: "1.4.0"},
		{in: "http://registry.example.com:8080/web@" + d, repo: "web", digest: d, want: "http://registry.example.com:8080/web@" + d},
		{in: "oci:/tmp/layouts/web@" + d, repo: "web", digest: d, want: "oci:/tmp/layouts/web@" + d},
		{in: "oci:/tmp/layouts/web:v1", repo: "web", tag: "v1"},
		{in: "registry.example.com@" + d, want: "error: found no repository"},
		{in: "registry.example.com/acme/web@sha256:abc", want: `error: digest "sha256:abc"`},
		{in: "registry.example.com/Acme@" + d, want: `error: repository "Acme" is not valid`},
		{in: "registry.example.com/acme:-bad", want: `error: tag "-bad" is not valid`},
	} {
		ref, err := ocicopy.ParseReference(tc.in)
		if e, ok := strings.CutPrefix(tc.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), e) {
				t.Errorf("ParseReference(%q) = %+v, %v; want an error with %q", tc.in, ref, err, e)
			}
			continue
		}
		if err != nil || ref.Repository != tc.repo || ref.Tag != tc.tag || string(ref.Digest) != tc.digest {
			t.Errorf("ParseReference(%q) = %+v, %v; want repository %q, tag %q, digest %q", tc.in, ref, err, tc.repo, tc.tag, tc.digest)
			continue
		}
		if tc.want != "" && ref.String() != tc.want {
			t.Errorf("ParseReference(%q).String() = %q, want %q", tc.in, ref.String(), tc.want)
		}
	}
}

// FuzzParseReference: whatever parses prints as a reference that parses
// to the same thing.
func FuzzParseReference(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:5000/acme/web@sha256:4f1c0e2d3b6a5f7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e",
		"registry.example.com/acme/web:1.4.0", "https://r.example/x/y:z", "oci:/tmp/a:b", "http://[::1]:80/a",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ocicopy.ParseReference(s)
		if err != nil {
			return
		}
		again, err := ocicopy.ParseReference(ref.String())
		if err != nil {
			t.Fatalf("%q parsed as %+v, whose String %q does not parse: %v", s, ref, ref.String(), err)
		}
		if again != ref {
			t.Fatalf("%q parsed as %+v; its String %q parses as %+v", s, ref, ref.String(), again)
		}
	})
}
