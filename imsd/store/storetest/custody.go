package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// buildAgent creates the vendor install with a build agent token and
// enrols build agent id.
func (e *env) buildAgent(id string) store.Agent {
	e.t.Helper()
	ok(e.t, e.s.CreateBuildAgentToken(e.ctx(), store.EnrollmentToken{Hash: "hash-" + id, ExpiresAt: at(time.Hour), CreatedAt: T0}))
	a, err := e.s.Enroll(e.ctx(), "hash-"+id, store.Agent{ID: id, PublicKey: []byte("key-" + id), Build: true}, at(time.Minute))
	ok(e.t, err)
	return a
}

func testBuildAgentRole(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	a := e.buildAgent("bag-1")
	equal(t, "build agent's install", a.InstallID, store.VendorInstallID)
	vendor, err := e.s.GetInstall(ctx, store.VendorInstallID)
	ok(t, err)
	equal(t, "vendor install name", vendor.Name, store.VendorInstallName)
	// A second token reuses the vendor install.
	ok(t, e.s.CreateBuildAgentToken(ctx, store.EnrollmentToken{Hash: "hash-b2", ExpiresAt: at(time.Hour), CreatedAt: T0}))
	// Roles and tokens must match, and a mismatch spends nothing.
	_, err = e.s.Enroll(ctx, "hash-b2", store.Agent{ID: "ag-x", PublicKey: []byte{1}}, at(time.Minute))
	wantErr(t, err, errs.PermissionDenied, "build agent's; enrol with --role build")
	ok(t, e.s.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "hash-i", InstallID: inst, ExpiresAt: at(time.Hour), CreatedAt: T0}))
	_, err = e.s.Enroll(ctx, "hash-i", store.Agent{ID: "bag-x", PublicKey: []byte{1}, Build: true}, at(time.Minute))
	wantErr(t, err, errs.PermissionDenied, "needs a build agent token")
	_, err = e.s.Enroll(ctx, "hash-b2", store.Agent{ID: "bag-2", PublicKey: []byte{1}, Build: true}, at(time.Minute))
	ok(t, err)
	_, err = e.s.Enroll(ctx, "hash-i", store.Agent{ID: "ag-2", PublicKey: []byte{1}}, at(time.Minute))
	ok(t, err)
}

const (
	d1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	d2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func testBuilds(t *testing.T, e *env) {
	ctx := e.ctx()
	a := e.buildAgent("bag-1")
	finish := func(id string, out map[string]string, state store.JobState) error {
		t.Helper()
		j := newJob(id, store.VendorInstallID, T0)
		j.ComponentType = store.BuildType
		ok(t, e.s.EnqueueJob(ctx, j))
		c := e.claimOne(store.VendorInstallID, a.ID, at(time.Minute))
		r := store.Result{State: state, Outputs: out}
		if out != nil {
			b, err := store.BuildFromOutputs(id, out, at(2*time.Minute))
			if err != nil {
				return err
			}
			r.Build = &b
		}
		_, err := e.s.FinishJob(ctx, id, writer(c), r, at(2*time.Minute))
		return err
	}
	out := map[string]string{"repository": "web", "digest": d1, "size": "397", "media_type": "application/vnd.oci.image.manifest.v1+json",
		"kind": "sync", "source": "docker.io/library/web:1.0", "source_digest": d1}
	ok(t, finish("job-b1", out, store.JobSucceeded))
	b, err := e.s.BuildByDigest(ctx, "web", d1)
	ok(t, err)
	equal(t, "build id", b.ID, "job-b1")
	equal(t, "build size", b.Size, int64(397))
	equal(t, "build source", b.Source, "docker.io/library/web:1.0")
	equal(t, "build time", b.CreatedAt, at(2*time.Minute))
	// A failed build job records nothing.
	out2 := map[string]string{"repository": "web", "digest": d2, "kind": "sync", "source": "x/web:2"}
	ok(t, finish("job-b2", out2, store.JobFailed))
	_, err = e.s.BuildByDigest(ctx, "web", d2)
	wantErr(t, err, errs.NotFound)
	bad := map[string]string{"repository": "web", "digest": "sha256:short", "kind": "sync", "source": "x"}
	if _, err := store.BuildFromOutputs("j", bad, T0); !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "outputs.digest") {
		t.Fatalf("a bad digest: %v", err)
	}
	// A job of another type, or of an install, makes no build.
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-i", inst, T0)
	c := e.claimOne(inst, "ag-1", at(time.Minute))
	b2, _ := store.BuildFromOutputs("job-i", out2, T0)
	_, err = e.s.FinishJob(ctx, "job-i", writer(c), store.Result{State: store.JobSucceeded, Build: &b2}, at(2*time.Minute))
	ok(t, err)
	_, err = e.s.BuildByDigest(ctx, "web", d2)
	wantErr(t, err, errs.NotFound)
	list, err := e.s.ListBuilds(ctx, "", 0)
	ok(t, err)
	equal(t, "builds", len(list), 1)
	// It survives a restart.
	list, err = e.second().ListBuilds(ctx, "web", 10)
	ok(t, err)
	equal(t, "builds after reopen", len(list), 1)
	// The build's audit event is in the vendor chain.
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: store.VendorInstallID, OneChain: true})
	ok(t, err)
	found := false
	for _, ev := range evs {
		found = found || ev.Kind == "build.recorded" && ev.Subject == "build:job-b1"
	}
	if !found {
		t.Fatalf("no build.recorded event in the vendor chain: %+v", evs)
	}
}

func testRegistryGrants(t *testing.T, e *env) {
	ctx := e.ctx()
	acme, globex := e.install("acme"), e.install("globex")
	e.agent(acme, "ag-a")
	e.agent(globex, "ag-g")
	grant := func(id string, expires time.Duration) store.RegistryGrant {
		g := store.RegistryGrant{ID: id, Hash: "h-" + id, InstallID: acme, JobID: "job-1", Attempt: 1,
			Scopes: []string{"repository:web:pull"}, CreatedAt: T0, ExpiresAt: at(expires)}
		ok(t, e.s.CreateRegistryGrant(ctx, g))
		return g
	}
	grant("g1", 5*time.Minute)
	grant("g2", 5*time.Minute)
	_, err := e.s.ExchangeRegistryGrant(ctx, "g1", "wrong", "ag-a", at(time.Minute), nil)
	wantErr(t, err, errs.PermissionDenied, "the secret does not match")
	_, err = e.s.ExchangeRegistryGrant(ctx, "g1", "h-g1", "ag-g", at(time.Minute), nil)
	wantErr(t, err, errs.PermissionDenied, "belongs to another install")
	_, err = e.s.ExchangeRegistryGrant(ctx, "g1", "h-g1", "ag-a", at(time.Minute), func(store.RegistryGrant) error { return fmt.Errorf("scope x") })
	wantErr(t, err, errs.PermissionDenied, "scope x")
	_, err = e.s.ExchangeRegistryGrant(ctx, "nope", "h", "ag-a", at(time.Minute), nil)
	wantErr(t, err, errs.PermissionDenied, "unknown")
	_, err = e.s.ExchangeRegistryGrant(ctx, "g1", "h-g1", "ag-none", at(time.Minute), nil)
	wantErr(t, err, errs.PermissionDenied, "agent")
	// Refusals spent nothing: the right exchange works, once.
	g, err := e.s.ExchangeRegistryGrant(ctx, "g1", "h-g1", "ag-a", at(time.Minute), func(g store.RegistryGrant) error {
		equal(t, "scopes seen by the check", strings.Join(g.Scopes, " "), "repository:web:pull")
		return nil
	})
	ok(t, err)
	equal(t, "used by", g.UsedBy, "ag-a")
	_, err = e.s.ExchangeRegistryGrant(ctx, "g1", "h-g1", "ag-a", at(2*time.Minute), nil)
	wantErr(t, err, errs.PermissionDenied, "already exchanged")
	_, err = e.s.ExchangeRegistryGrant(ctx, "g2", "h-g2", "ag-a", at(5*time.Minute), nil)
	wantErr(t, err, errs.PermissionDenied, "expired")

	// Concurrent exchanges of one grant, on two stores: exactly one wins.
	grant("g3", 5*time.Minute)
	stores := []*store.Store{e.s, e.second()}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := stores[i%2].ExchangeRegistryGrant(ctx, "g3", "h-g3", "ag-a", at(time.Minute), nil)
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	wins := 0
	for err := range errc {
		if err == nil {
			wins++
			continue
		}
		wantErr(t, err, errs.PermissionDenied, "already exchanged")
	}
	equal(t, "winning exchanges", wins, 1)

	// Every issue, exchange and refusal is audited in acme's chain.
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: acme, OneChain: true})
	ok(t, err)
	count := map[string]int{}
	for _, ev := range evs {
		count[ev.Kind]++
	}
	equal(t, "grants issued", count["registry.grant_issued"], 3)
	equal(t, "grants exchanged", count["registry.grant_exchanged"], 2)
	// secret, another install's agent, scope, unknown agent (not in a
	// chain: no install), reuse, expiry, and seven lost races.
	if count["registry.grant_refused"] < 5+7 {
		t.Fatalf("%d refusals audited in acme's chain, want at least 12", count["registry.grant_refused"])
	}
	ok(t, e.s.SweepRegistryGrants(ctx, at(time.Hour)))
	_, err = e.s.ExchangeRegistryGrant(ctx, "g3", "h-g3", "ag-a", at(time.Minute), nil)
	wantErr(t, err, errs.PermissionDenied, "unknown")
}
