package helm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/plugins/helm/kubetest"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// denyForbiddenGreeting is a cluster policy: ConfigMaps in namespaces
// labelled policy=enforced may not greet "forbidden".
const denyForbiddenGreeting = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: deny-forbidden-greeting
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "!has(object.data) || !('greeting' in object.data) || object.data.greeting != 'forbidden'"
    message: "greeting 'forbidden' is not allowed here"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: deny-forbidden-greeting
spec:
  policyName: deny-forbidden-greeting
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        policy: enforced
`

// TestKubeAPIServer runs the helm type against a real kube-apiserver and
// etcd: install, upgrade, a failed upgrade rolled back, drift after
// kubectl edit, a cluster policy (ValidatingAdmissionPolicy) that denies
// a change, cancel during the wait, uninstall. The steps build on each
// other, in order.
func TestKubeAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p := New()
	env := map[string]string{"KUBECONFIG": c.Kubeconfig}
	chartDir, _ := filepath.Abs("testdata/web")
	config := func(values map[string]any) map[string]any {
		return map[string]any{"release": "web", "namespace": "shop", "create_namespace": true,
			"chart_dir": chartDir, "values": values, "timeout": "60s"}
	}
	apply := func(t *testing.T, ctx context.Context, cfg map[string]any) (*sdk.ApplyResponse, string, error) {
		t.Helper()
		var log recordLog
		res, err := p.Apply(ctx, &sdk.ApplyRequest{Config: cfg, Env: env, Log: &log})
		return res, log.String(), err
	}
	kubectl := func(t *testing.T, extraEnv []string, args ...string) string {
		t.Helper()
		out, err := c.Kubectl(ctx, extraEnv, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	greeting := func(t *testing.T) string {
		t.Helper()
		return kubectl(t, nil, "-n", "shop", "get", "configmap", "web-config", "-o", "jsonpath={.data.greeting}")
	}
	mustSucceed := func(t *testing.T, cfg map[string]any, revision string) {
		t.Helper()
		res, log, err := apply(t, ctx, cfg)
		if err != nil {
			t.Fatalf("apply: %v\nlog:\n%s", err, log)
		}
		if res.Outputs["revision"] != revision || res.Outputs["status"] != "deployed" {
			t.Fatalf("apply: outputs %v, want revision %s deployed", res.Outputs, revision)
		}
	}

	t.Run("server version", func(t *testing.T) {
		v, err := ServerVersion(ctx, c.Kubeconfig)
		if err != nil || !strings.Contains(v, "Kubernetes v1.") {
			t.Fatalf("ServerVersion: %q, %v", v, err)
		}
	})
	t.Run("install", func(t *testing.T) {
		res, err := p.Plan(ctx, &sdk.PlanRequest{Config: config(nil), Env: env, Log: discardLog{}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(res.Changes, "3 to create") {
			t.Fatalf("plan before install: %s", res.Changes)
		}
		mustSucceed(t, config(nil), "1")
		if g := greeting(t); g != "hello" {
			t.Fatalf("greeting %q after install", g)
		}
		// The history is in the cluster, as Helm's Secrets driver keeps it.
		if out := kubectl(t, nil, "-n", "shop", "get", "secrets", "-l", "owner=helm,name=web", "-o", "name"); out != "secret/sh.helm.release.v1.web.v1" {
			t.Fatalf("release secrets: %q", out)
		}
	})
	t.Run("upgrade", func(t *testing.T) {
		res, err := p.Plan(ctx, &sdk.PlanRequest{Config: config(map[string]any{"greeting": "hi"}), Env: env, Log: discardLog{}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.PlannedChanges) != 1 || res.PlannedChanges[0].Address != "ConfigMap/shop/web-config" {
			t.Fatalf("plan of the upgrade: %+v", res.PlannedChanges)
		}
		mustSucceed(t, config(map[string]any{"greeting": "hi"}), "2")
		if g := greeting(t); g != "hi" {
			t.Fatalf("greeting %q after upgrade", g)
		}
	})
	t.Run("failed upgrade rolls back", func(t *testing.T) {
		cfg := config(map[string]any{"greeting": "broken", "deployment": true})
		cfg["timeout"] = "5s"
		_, log, err := apply(t, ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "rolled back to revision 2") {
			t.Fatalf("apply of a never-ready upgrade: %v\nlog:\n%s", err, log)
		}
		if g := greeting(t); g != "hi" {
			t.Fatalf("greeting %q after the rollback, want revision 2's", g)
		}
		if out, err := c.Kubectl(ctx, nil, "-n", "shop", "get", "deployment", "web"); err == nil {
			t.Fatalf("the rollback left the upgrade's Deployment: %s", out)
		}
	})
	t.Run("drift after kubectl edit", func(t *testing.T) {
		res, err := p.Drift(ctx, &sdk.DriftRequest{Config: config(map[string]any{"greeting": "hi"}), Env: env, Log: discardLog{}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Drifted {
			t.Fatalf("drift right after the rollback: %s", res.Changes)
		}
		editor := filepath.Join(t.TempDir(), "editor.sh")
		if err := os.WriteFile(editor, []byte("#!/bin/sh\nsed -i 's/greeting: hi/greeting: edited-by-hand/' \"$1\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		kubectl(t, []string{"KUBE_EDITOR=" + editor, "EDITOR=" + editor}, "-n", "shop", "edit", "configmap", "web-config")
		if g := greeting(t); g != "edited-by-hand" {
			t.Fatalf("kubectl edit did not change the greeting: %q", g)
		}
		kubectl(t, nil, "-n", "shop", "delete", "secret", "web-secret")
		res, err = p.Drift(ctx, &sdk.DriftRequest{Config: config(map[string]any{"greeting": "hi"}), Env: env, Log: discardLog{}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Drifted || !strings.Contains(res.Changes, "update ConfigMap/shop/web-config: changed outside the release: data.greeting") ||
			!strings.Contains(res.Changes, "create Secret/shop/web-secret: missing from the cluster") {
			t.Fatalf("drift after kubectl edit and delete: %s", res.Changes)
		}
		// An apply repairs it.
		mustSucceed(t, config(map[string]any{"greeting": "hi"}), "5")
		if g := greeting(t); g != "hi" {
			t.Fatalf("greeting %q after the repairing apply", g)
		}
		kubectl(t, nil, "-n", "shop", "get", "secret", "web-secret")
	})
	t.Run("cluster policy denies a change", func(t *testing.T) {
		policies := map[string]any{"release": "byoc-cluster-policies", "namespace": "kube-system", "manifests": []any{denyForbiddenGreeting}, "timeout": "30s"}
		res, log, err := apply(t, ctx, policies)
		if err != nil {
			t.Fatalf("install the cluster policies: %v\n%s", err, log)
		}
		if res.Outputs["revision"] != "1" {
			t.Fatalf("cluster policies: %v", res.Outputs)
		}
		kubectl(t, nil, "label", "namespace", "shop", "policy=enforced")
		// The admission plugin sees a new policy within a moment.
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := c.Kubectl(ctx, nil, "-n", "shop", "create", "configmap", "probe", "--from-literal=greeting=forbidden", "--dry-run=server")
			if err != nil && strings.Contains(err.Error(), "greeting 'forbidden' is not allowed here") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the policy never took effect: %v", err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		_, log, err = apply(t, ctx, config(map[string]any{"greeting": "forbidden"}))
		if err == nil || !strings.Contains(err.Error(), "greeting 'forbidden' is not allowed here") {
			t.Fatalf("apply denied by the cluster policy: %v\nlog:\n%s", err, log)
		}
		if g := greeting(t); g != "hi" {
			t.Fatalf("greeting %q after a denied upgrade", g)
		}
	})
	t.Run("cancel during the wait", func(t *testing.T) {
		cfg := config(map[string]any{"greeting": "hi", "deployment": true})
		cfg["timeout"] = "5m"
		cfg["rollback_on_failure"] = false
		jobCtx, cancelJob := context.WithCancel(ctx)
		defer cancelJob()
		done := make(chan error, 1)
		go func() {
			_, _, err := apply(t, jobCtx, cfg)
			done <- err
		}()
		// Cancel once the Deployment exists (the upgrade is waiting).
		deadline := time.Now().Add(time.Minute)
		for {
			if _, err := c.Kubectl(ctx, nil, "-n", "shop", "get", "deployment", "web"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the upgrade never created its Deployment")
			}
			time.Sleep(200 * time.Millisecond)
		}
		cancelled := time.Now()
		cancelJob()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("apply after cancel: %v", err)
			}
			t.Logf("apply returned %s after the cancel", time.Since(cancelled).Round(time.Millisecond))
		case <-time.After(15 * time.Second):
			t.Fatal("apply did not return within 15s of the cancel")
		}
		out := kubectl(t, nil, "-n", "shop", "get", "secrets", "-l", "owner=helm,name=web", "-o", "jsonpath={range .items[*]}{.metadata.labels.version}={.metadata.labels.status} {end}")
		if !strings.Contains(out, "=failed") || strings.Contains(out, "=pending") {
			t.Fatalf("release history after the cancel: %s; want the cancelled revision failed", out)
		}
		// The next apply goes on from there.
		cfg = config(map[string]any{"greeting": "hi"})
		if _, log, err := apply(t, ctx, cfg); err != nil {
			t.Fatalf("apply after the cancel: %v\n%s", err, log)
		}
	})
	t.Run("uninstall", func(t *testing.T) {
		var log recordLog
		if _, err := p.Destroy(ctx, &sdk.DestroyRequest{Config: config(nil), Env: env, Log: &log}); err != nil {
			t.Fatal(err)
		}
		if out := kubectl(t, nil, "-n", "shop", "get", "configmaps,secrets,services", "-l", "app=web", "-o", "name"); out != "" {
			t.Fatalf("left after uninstall: %s", out)
		}
		if out := kubectl(t, nil, "-n", "shop", "get", "secrets", "-l", "owner=helm,name=web", "-o", "name"); out != "" {
			t.Fatalf("history left after uninstall: %s", out)
		}
		if _, err := p.Destroy(ctx, &sdk.DestroyRequest{Config: config(nil), Env: env, Log: &log}); err != nil {
			t.Fatalf("a second destroy: %v", err)
		}
		if !strings.Contains(log.String(), "release web does not exist: nothing to destroy") {
			t.Fatalf("second destroy log:\n%s", log.String())
		}
	})
}
