package kubetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCluster starts the control plane and talks to it with kubectl.
func TestCluster(t *testing.T) {
	start := time.Now()
	c := Start(t)
	t.Logf("etcd + kube-apiserver ready in %s", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Kubectl(ctx, nil, "get", "namespace", "default", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "namespace/default" {
		t.Fatalf("kubectl get namespace default: %q", out)
	}
	// The API server admits with ValidatingAdmissionPolicy (GA since
	// 1.30): the resource is served.
	out, err = c.Kubectl(ctx, nil, "api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "validatingadmissionpolicies") {
		t.Fatalf("no validatingadmissionpolicies resource: %s", out)
	}
}

// recordingTB records how Missing ended a test instead of ending it.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                      {}
func (r *recordingTB) Skip(args ...any)             { r.skipped = args[0].(string) }
func (r *recordingTB) Fatalf(f string, args ...any) { r.failed = f }

func TestMissingFailsUnderCI(t *testing.T) {
	err := errors.New("kubetest: no kube-apiserver")
	for _, tc := range []struct {
		ci       string
		wantFail bool
	}{{"true", true}, {"", false}, {"1", false}} {
		t.Setenv("CI", tc.ci)
		r := &recordingTB{TB: t}
		Missing(r, err)
		if tc.wantFail && (r.failed == "" || r.skipped != "") {
			t.Errorf("CI=%q: failed %q, skipped %q; want a failure", tc.ci, r.failed, r.skipped)
		}
		if !tc.wantFail && (r.skipped == "" || r.failed != "" || !strings.Contains(r.skipped, "no kube-apiserver")) {
			t.Errorf("CI=%q: failed %q, skipped %q; want a skip naming the cause", tc.ci, r.failed, r.skipped)
		}
	}
}

func TestFindAPIServerEnv(t *testing.T) {
	t.Setenv("KUBE_APISERVER", "/nonexistent/kube-apiserver")
	_, err := FindAPIServer()
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "KUBE_APISERVER=/nonexistent") {
		t.Fatalf("FindAPIServer with a missing $KUBE_APISERVER: %v", err)
	}
}
