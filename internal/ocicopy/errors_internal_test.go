package ocicopy

import (
	"errors"
	"net/url"
	"testing"
)

// A registry that went away between two requests on a kept-alive
// connection fails the second with net/http's "server closed idle
// connection": that is the registry unreachable (e2e
// TestImageDeployIntoLayoutAndVendorOutage met it once in CI and the job
// said "resolve …" instead of "vendor registry … is unreachable").
func TestServerClosedIdleIsUnreachable(t *testing.T) {
	err := &url.Error{Op: "Head", URL: "http://127.0.0.1:1/v2/web/manifests/sha256:0", Err: errors.New("http: server closed idle connection")}
	var ue *UnreachableError
	if got := sideError(Source, &Repo{name: "127.0.0.1:1/web"}, "resolve x in", err); !errors.As(got, &ue) {
		t.Fatalf("got %v, want an UnreachableError", got)
	}
	if unreachable(errors.New("manifest unknown")) {
		t.Fatal("an unrelated error counted as unreachable")
	}
}
