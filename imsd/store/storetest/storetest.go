// Package storetest is the conformance suite every store backend passes
// (SQLite and PostgreSQL): the same behaviour, checked the same way,
// including a simulated restart.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// OpenFunc opens a store on a fresh, empty database and closes it when t
// ends. reopen opens another store on the same database: a restarted
// process, or a second imsd replica while the first is still open. The
// suite closes the stores reopen returns.
type OpenFunc func(t *testing.T) (s *store.Store, reopen func() *store.Store)

// T0 is the fake clock's start. Every time the suite passes is T0 plus an
// offset.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return T0.Add(d) }

// Run runs the conformance suite against the stores open makes.
func Run(t *testing.T, open OpenFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"APITokens", testAPITokens},
		{"Apps", testApps},
		{"AppRevisions", testAppRevisions},
		{"PluginTypes", testPluginTypes},
		{"Installs", testInstalls},
		{"Enroll", testEnroll},
		{"EnrollConcurrent", testEnrollConcurrent},
		{"Agents", testAgents},
		{"EnqueueAndGet", testEnqueueAndGet},
		{"EnqueueAssigned", testEnqueueAssigned},
		{"EnqueueJobs", testEnqueueJobs},
		{"EnqueueKeys", testEnqueueKeys},
		{"EnqueueKeysConcurrent", testEnqueueKeysConcurrent},
		{"ClaimOrder", testClaimOrder},
		{"ClaimExclusive", testClaimExclusive},
		{"AckAndFinish", testAckAndFinish},
		{"Fencing", testFencing},
		{"LeaseExpiryRequeues", testLeaseExpiryRequeues},
		{"MaxAttempts", testMaxAttempts},
		{"ExpiredRunningSaysWhy", testExpiredRunningSaysWhy},
		{"TimeoutBackstop", testTimeoutBackstop},
		{"RenewLeases", testRenewLeases},
		{"Cancel", testCancel},
		{"Logs", testLogs},
		{"LogsBefore", testLogsBefore},
		{"Fleet", testFleet},
		{"ListJobs", testListJobs},
		{"QueuedJobInstalls", testQueuedJobInstalls},
		{"Restart", testRestart},
		{"Listen", testListen},
		{"WorkflowLifecycle", testWorkflowLifecycle},
		{"WorkflowApproveCancel", testWorkflowApproveCancel},
		{"TriggerTicks", testTriggerTicks},
		{"ActionRunsAndHealth", testActionRunsAndHealth},
		{"Modes", testModes},
		{"AgentPermissions", testAgentPermissions},
		{"AgentStack", testAgentStack},
		{"BreakGlass", testBreakGlass},
		{"AuditEvents", testAuditEvents},
		{"AuditAppendOnly", testAuditAppendOnly},
		{"AuditTamperEdit", testAuditTamperEdit},
		{"AuditTamperDelete", testAuditTamperDelete},
		{"AuditTamperInsert", testAuditTamperInsert},
		{"AuditWriteFailure", testAuditWriteFailure},
		{"AuditConcurrent", testAuditConcurrent},
		{"AuditRecordsAfter", testAuditRecordsAfter},
		{"PolicyFindings", testPolicyFindings},
		{"Drift", testDrift},
		{"BuildAgentRole", testBuildAgentRole},
		{"Builds", testBuilds},
		{"RegistryGrants", testRegistryGrants},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, reopen := open(t)
			tc.fn(t, &env{t: t, s: s, reopen: reopen})
		})
	}
}

type env struct {
	t      *testing.T
	s      *store.Store
	reopen func() *store.Store
}

func (e *env) ctx() context.Context { return e.t.Context() }

// second opens another store on the same database, closed at the end.
func (e *env) second() *store.Store {
	e.t.Helper()
	s := e.reopen()
	e.t.Cleanup(func() { s.Close() })
	return s
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// wantErr checks err has code and a message containing each of contains.
func wantErr(t testing.TB, err error, code errs.Code, contains ...string) {
	t.Helper()
	if !errs.Is(err, code) {
		t.Fatalf("err = %v (code %q), want code %q", err, errs.CodeOf(err), code)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Fatalf("err = %q, want it to contain %q", err, c)
		}
	}
}

func equal[T comparable](t testing.TB, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// Fixtures.

// install creates app "app-<name>" (once) and install name with ID
// "inst-<name>", and returns the install ID.
func (e *env) install(name string) string {
	e.t.Helper()
	err := e.s.CreateApp(e.ctx(), store.App{ID: "app-1", Name: "shop", CreatedAt: T0})
	if err != nil && !errs.Is(err, errs.AlreadyExists) {
		e.t.Fatal(err)
	}
	id := "inst-" + name
	ok(e.t, e.s.CreateInstall(e.ctx(), store.Install{ID: id, AppID: "app-1", Name: name, CreatedAt: T0},
		store.EnrollmentToken{Hash: "hash-" + id, ExpiresAt: at(time.Hour), CreatedAt: T0}))
	return id
}

// agent enrols agent id for installID with a fresh token.
func (e *env) agent(installID, id string) store.Agent {
	e.t.Helper()
	hash := "hash-" + id
	ok(e.t, e.s.CreateEnrollmentToken(e.ctx(), store.EnrollmentToken{Hash: hash, InstallID: installID, ExpiresAt: at(time.Hour), CreatedAt: T0}))
	a, err := e.s.Enroll(e.ctx(), hash, store.Agent{ID: id, PublicKey: []byte("key-" + id), Hostname: "host", Version: "v1"}, at(time.Minute))
	ok(e.t, err)
	return a
}

func newJob(id, installID string, created time.Time) store.Job {
	return store.Job{
		ID: id, InstallID: installID, ComponentType: "terraform", Component: "network", Operation: "apply",
		Config: []byte(`{"dir":"infra"}`), MaxAttempts: 3, Timeout: 10 * time.Minute,
		CreatedAt: created, CreatedBy: "tok-admin",
	}
}

func (e *env) enqueue(id, installID string, created time.Time) {
	e.t.Helper()
	ok(e.t, e.s.EnqueueJob(e.ctx(), newJob(id, installID, created)))
}

// claimOne claims exactly one job for agentID with a lease of a minute
// from now.
func (e *env) claimOne(installID, agentID string, now time.Time) store.Job {
	e.t.Helper()
	jobs, err := e.s.ClaimJobs(e.ctx(), installID, store.Writer{AgentID: agentID}, 1, now.Add(time.Minute), now)
	ok(e.t, err)
	if len(jobs) != 1 {
		e.t.Fatalf("claimed %d jobs, want 1", len(jobs))
	}
	return jobs[0]
}

func writer(j store.Job) store.Writer {
	return store.Writer{AgentID: j.AgentID, FencingToken: j.FencingToken}
}

func (e *env) job(id string) store.Job {
	e.t.Helper()
	j, err := e.s.GetJob(e.ctx(), id)
	ok(e.t, err)
	return j
}

func (e *env) logs(jobID string) []store.LogLine {
	e.t.Helper()
	lines, err := e.s.ListLogs(e.ctx(), jobID, 0, 0, 0)
	ok(e.t, err)
	return lines
}

func lines(attempt int, from, to int64) []store.LogLine {
	var out []store.LogLine
	for seq := from; seq <= to; seq++ {
		out = append(out, store.LogLine{Attempt: attempt, Seq: seq, Time: at(time.Duration(seq) * time.Millisecond), Stream: 1, Text: fmt.Sprintf("line %d", seq)})
	}
	return out
}

// The tests.

func testAPITokens(t *testing.T, e *env) {
	ctx := e.ctx()
	n, err := e.s.CountAPITokens(ctx)
	ok(t, err)
	equal(t, "count", n, 0)
	ok(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-1", Name: "ci", Role: store.RoleAdmin, CreatedAt: T0}, "h1"))
	ok(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-2", Name: "viewer", Role: store.RoleViewer, CreatedAt: T0}, "h2"))
	got, err := e.s.APITokenByHash(ctx, "h1")
	ok(t, err)
	if got != (store.APIToken{ID: "tok-1", Name: "ci", Role: store.RoleAdmin, CreatedAt: T0}) {
		t.Fatalf("APITokenByHash = %+v", got)
	}
	n, err = e.s.CountAPITokens(ctx)
	ok(t, err)
	equal(t, "count", n, 2)
	_, err = e.s.APITokenByHash(ctx, "nope")
	wantErr(t, err, errs.NotFound)
	wantErr(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-3", Name: "x", Role: store.RoleAdmin}, "h1"), errs.AlreadyExists)
	err = e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-4", Name: "x", Role: "root"}, "h4")
	wantErr(t, err, errs.Invalid)
	var fe *errs.Error
	if errors.As(err, &fe); fe.Field != "role" {
		t.Fatalf("field = %q, want role", fe.Field)
	}
}

func testApps(t *testing.T, e *env) {
	ctx := e.ctx()
	ok(t, e.s.CreateApp(ctx, store.App{ID: "app-2", Name: "zebra", Description: "z", CreatedAt: T0}))
	ok(t, e.s.CreateApp(ctx, store.App{ID: "app-1", Name: "alpha", CreatedAt: at(time.Second)}))
	apps, err := e.s.ListApps(ctx)
	ok(t, err)
	if len(apps) != 2 || apps[0].Name != "alpha" || apps[1].Name != "zebra" {
		t.Fatalf("ListApps = %+v, want alpha, zebra", apps)
	}
	for _, key := range []string{"app-2", "zebra"} {
		a, err := e.s.GetApp(ctx, key)
		ok(t, err)
		if a != (store.App{ID: "app-2", Name: "zebra", Description: "z", CreatedAt: T0}) {
			t.Fatalf("GetApp(%s) = %+v", key, a)
		}
	}
	_, err = e.s.GetApp(ctx, "nope")
	wantErr(t, err, errs.NotFound, `app "nope" not found`)
	wantErr(t, e.s.CreateApp(ctx, store.App{ID: "app-3", Name: "alpha"}), errs.AlreadyExists, "alpha")
	wantErr(t, e.s.CreateApp(ctx, store.App{ID: "app-4"}), errs.Invalid, "name")
}

func testAppRevisions(t *testing.T, e *env) {
	ctx := e.ctx()
	ok(t, e.s.CreateApp(ctx, store.App{ID: "app-1", Name: "acme", CreatedAt: T0}))
	_, err := e.s.GetAppRevision(ctx, "app-1", 0)
	wantErr(t, err, errs.NotFound, "no revisions yet")
	files1 := map[string][]byte{"app.toml": []byte("name = \"acme\"\n")}
	r1, created, err := e.s.CreateAppRevision(ctx, store.AppRevision{AppID: "app-1", Digest: "d1", Version: "1.0", Files: files1, CreatedAt: T0, CreatedBy: "ci"})
	ok(t, err)
	equal(t, "first revision number", r1.Number, int64(1))
	equal(t, "first push created", created, true)
	// The same digest again: no new revision.
	again, created, err := e.s.CreateAppRevision(ctx, store.AppRevision{AppID: "app-1", Digest: "d1", Files: files1, CreatedAt: at(time.Second)})
	ok(t, err)
	equal(t, "repeated push number", again.Number, int64(1))
	equal(t, "repeated push created", created, false)
	files2 := map[string][]byte{"app.toml": []byte("name = \"acme\"\nversion = \"2\"\n"), "scripts/x.sh": {0, 1, 2, 0xff}}
	r2, created, err := e.s.CreateAppRevision(ctx, store.AppRevision{AppID: "app-1", Digest: "d2", Version: "2.0", Files: files2, CreatedAt: at(2 * time.Second)})
	ok(t, err)
	equal(t, "second revision number", r2.Number, int64(2))
	equal(t, "second push created", created, true)
	revs, err := e.s.ListAppRevisions(ctx, "app-1")
	ok(t, err)
	if len(revs) != 2 || revs[0].Number != 2 || revs[1].Number != 1 || revs[1].Version != "1.0" || revs[1].CreatedBy != "ci" {
		t.Fatalf("ListAppRevisions = %+v, want 2 then 1", revs)
	}
	latest, err := e.s.GetAppRevision(ctx, "app-1", 0)
	ok(t, err)
	equal(t, "latest", latest.Number, int64(2))
	equal(t, "binary file kept", string(latest.Files["scripts/x.sh"]), string(files2["scripts/x.sh"]))
	first, err := e.s.GetAppRevision(ctx, "app-1", 1)
	ok(t, err)
	equal(t, "revision 1 file", string(first.Files["app.toml"]), string(files1["app.toml"]))
	_, err = e.s.GetAppRevision(ctx, "app-1", 9)
	wantErr(t, err, errs.NotFound, "no revision 9")
	_, _, err = e.s.CreateAppRevision(ctx, store.AppRevision{AppID: "nope", Digest: "d", Files: files1, CreatedAt: T0})
	wantErr(t, err, errs.NotFound, `app "nope" not found`)
	_, _, err = e.s.CreateAppRevision(ctx, store.AppRevision{AppID: "app-1", Digest: "d3", CreatedAt: T0})
	wantErr(t, err, errs.Invalid, "files")
}

func testInstalls(t *testing.T, e *env) {
	ctx := e.ctx()
	ok(t, e.s.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: T0}))
	ok(t, e.s.CreateApp(ctx, store.App{ID: "app-2", Name: "blog", CreatedAt: T0}))
	tok := func(h string) store.EnrollmentToken {
		return store.EnrollmentToken{Hash: h, ExpiresAt: at(time.Hour), CreatedAt: T0}
	}
	in := store.Install{ID: "inst-1", AppID: "app-1", Name: "acme-prod", Inputs: map[string]string{"region": "eu-west-1"}, CreatedAt: T0}
	ok(t, e.s.CreateInstall(ctx, in, tok("h1")))
	ok(t, e.s.CreateInstall(ctx, store.Install{ID: "inst-2", AppID: "app-2", Name: "acme-blog", CreatedAt: T0}, tok("h2")))
	ok(t, e.s.CreateInstall(ctx, store.Install{ID: "inst-3", AppID: "app-1", Name: "globex", CreatedAt: T0}, tok("h3")))

	wantErr(t, e.s.CreateInstall(ctx, store.Install{ID: "inst-9", AppID: "app-9", Name: "x"}, tok("h9")), errs.NotFound, "app-9")
	wantErr(t, e.s.CreateInstall(ctx, store.Install{ID: "inst-8", AppID: "app-1", Name: "globex"}, tok("h8")), errs.AlreadyExists, "globex")
	// The failed transaction left no token behind.
	_, err := e.s.Enroll(ctx, "h8", store.Agent{ID: "ag", PublicKey: []byte("k")}, at(time.Minute))
	wantErr(t, err, errs.PermissionDenied, "unknown")

	for _, key := range []string{"inst-1", "acme-prod"} {
		got, err := e.s.GetInstall(ctx, key)
		ok(t, err)
		if got.ID != in.ID || got.AppID != in.AppID || got.Name != in.Name || !got.CreatedAt.Equal(T0) || got.Inputs["region"] != "eu-west-1" || len(got.Inputs) != 1 {
			t.Fatalf("GetInstall(%s) = %+v", key, got)
		}
	}
	_, err = e.s.GetInstall(ctx, "nope")
	wantErr(t, err, errs.NotFound, "nope")
	// A mistyped name gets a suggestion (issue 33, item 5).
	_, err = e.s.GetInstall(ctx, "acme-prd")
	wantErr(t, err, errs.NotFound, `install "acme-prd" not found (did you mean "acme-prod"?)`)

	names := func(ins []store.Install) (out []string) {
		for _, in := range ins {
			out = append(out, in.Name)
		}
		return out
	}
	all, err := e.s.ListInstalls(ctx, "")
	ok(t, err)
	equal(t, "all installs", strings.Join(names(all), ","), "acme-blog,acme-prod,globex")
	of1, err := e.s.ListInstalls(ctx, "app-1")
	ok(t, err)
	equal(t, "installs of app-1", strings.Join(names(of1), ","), "acme-prod,globex")

	wantErr(t, e.s.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "hx", InstallID: "inst-9", ExpiresAt: at(time.Hour)}), errs.NotFound, "inst-9")
	wantErr(t, e.s.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "h1", InstallID: "inst-1", ExpiresAt: at(time.Hour)}), errs.AlreadyExists)

	// InstallID resolves like GetInstall, the second time from its cache;
	// a name not found is not remembered.
	for range 2 {
		for _, key := range []string{"inst-1", "acme-prod"} {
			id, err := e.s.InstallID(ctx, key)
			ok(t, err)
			equal(t, "InstallID("+key+")", id, "inst-1")
		}
		_, err = e.s.InstallID(ctx, "late")
		wantErr(t, err, errs.NotFound, "late")
	}
	ok(t, e.s.CreateInstall(ctx, store.Install{ID: "inst-late", AppID: "app-1", Name: "late", CreatedAt: T0}, tok("h-late")))
	id, err := e.s.InstallID(ctx, "late")
	ok(t, err)
	equal(t, "InstallID(late)", id, "inst-late")
}

func testEnroll(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	ok(t, e.s.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "short", InstallID: inst, ExpiresAt: at(time.Minute), CreatedAt: T0}))
	a := store.Agent{ID: "ag-1", InstallID: "ignored", PublicKey: []byte{1, 2, 3}, Hostname: "h", Version: "v1"}

	t.Run("once", func(t *testing.T) {
		got, err := e.s.Enroll(ctx, "hash-"+inst, a, at(time.Second))
		ok(t, err)
		equal(t, "install", got.InstallID, inst)
		equal(t, "enrolled at", got.EnrolledAt, at(time.Second))
		stored, err := e.s.GetAgent(ctx, "ag-1")
		ok(t, err)
		equal(t, "stored install", stored.InstallID, inst)
		equal(t, "stored key", string(stored.PublicKey), string([]byte{1, 2, 3}))
		equal(t, "stored enrolled at", stored.EnrolledAt, at(time.Second))
		if !stored.LastSeenAt.IsZero() {
			t.Fatalf("LastSeenAt = %v, want zero", stored.LastSeenAt)
		}
	})
	t.Run("twice", func(t *testing.T) {
		_, err := e.s.Enroll(ctx, "hash-"+inst, store.Agent{ID: "ag-2", PublicKey: []byte{1}}, at(2*time.Second))
		wantErr(t, err, errs.PermissionDenied, "already used")
		_, err = e.s.GetAgent(ctx, "ag-2")
		wantErr(t, err, errs.NotFound)
	})
	t.Run("expired", func(t *testing.T) {
		_, err := e.s.Enroll(ctx, "short", store.Agent{ID: "ag-3", PublicKey: []byte{1}}, at(time.Minute))
		wantErr(t, err, errs.PermissionDenied, "expired")
	})
	t.Run("unknown", func(t *testing.T) {
		_, err := e.s.Enroll(ctx, "nope", store.Agent{ID: "ag-4", PublicKey: []byte{1}}, at(time.Second))
		wantErr(t, err, errs.PermissionDenied, "unknown")
	})
	t.Run("duplicate agent leaves the token unused", func(t *testing.T) {
		ok(t, e.s.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "again", InstallID: inst, ExpiresAt: at(time.Hour)}))
		_, err := e.s.Enroll(ctx, "again", store.Agent{ID: "ag-1", PublicKey: []byte{1}}, at(time.Second))
		wantErr(t, err, errs.AlreadyExists)
		_, err = e.s.Enroll(ctx, "again", store.Agent{ID: "ag-5", PublicKey: []byte{1}}, at(time.Second))
		ok(t, err)
	})
}

func testEnrollConcurrent(t *testing.T, e *env) {
	inst := e.install("acme")
	// Two stores on one database: two replicas (PostgreSQL) or two
	// processes on one file (SQLite).
	stores := []*store.Store{e.s, e.second()}
	const n = 8
	var (
		wg   sync.WaitGroup
		errc = make(chan error, n)
	)
	for i := range n {
		wg.Go(func() {
			_, err := stores[i%2].Enroll(e.ctx(), "hash-"+inst, store.Agent{ID: fmt.Sprintf("ag-%d", i), PublicKey: []byte{1}}, at(time.Second))
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
		wantErr(t, err, errs.PermissionDenied, "already used")
	}
	equal(t, "successful enrolments", wins, 1)
	agents, err := e.s.AgentsForInstall(e.ctx(), inst)
	ok(t, err)
	equal(t, "agents", len(agents), 1)
}

func testAgents(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	for i, id := range []string{"ag-a", "ag-b", "ag-c"} {
		hash := "h-" + id
		ok(t, e.s.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: hash, InstallID: inst, ExpiresAt: at(time.Hour)}))
		_, err := e.s.Enroll(ctx, hash, store.Agent{ID: id, PublicKey: []byte{1}}, at(time.Duration(i)*time.Second))
		ok(t, err)
	}
	e.agent(other, "ag-other")
	agents, err := e.s.AgentsForInstall(ctx, inst)
	ok(t, err)
	var ids []string
	for _, a := range agents {
		ids = append(ids, a.ID)
	}
	equal(t, "agents newest first", strings.Join(ids, ","), "ag-c,ag-b,ag-a")

	ok(t, e.s.TouchAgent(ctx, "ag-a", at(time.Hour)))
	a, err := e.s.GetAgent(ctx, "ag-a")
	ok(t, err)
	equal(t, "last seen", a.LastSeenAt, at(time.Hour))
	// An older touch (a closed stream's last message, written after the
	// next stream's hello) never moves it back.
	ok(t, e.s.TouchAgent(ctx, "ag-a", at(time.Minute)))
	a, err = e.s.GetAgent(ctx, "ag-a")
	ok(t, err)
	equal(t, "last seen after an older touch", a.LastSeenAt, at(time.Hour))
	wantErr(t, e.s.TouchAgent(ctx, "nope", at(time.Hour)), errs.NotFound, "nope")
	_, err = e.s.GetAgent(ctx, "nope")
	wantErr(t, err, errs.NotFound, "nope")
}

func testEnqueueAndGet(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	j := newJob("job-1", inst, T0)
	ok(t, e.s.EnqueueJob(ctx, j))
	got := e.job("job-1")
	equal(t, "state", got.State, store.JobQueued)
	equal(t, "attempt", got.Attempt, 0)
	equal(t, "config", string(got.Config), `{"dir":"infra"}`)
	equal(t, "timeout", got.Timeout, 10*time.Minute)
	equal(t, "max attempts", got.MaxAttempts, 3)
	equal(t, "created at", got.CreatedAt, T0)
	equal(t, "created by", got.CreatedBy, "tok-admin")
	equal(t, "component", got.ComponentType+"/"+got.Operation, "terraform/apply")
	equal(t, "component name", got.Component, "network")
	if got.AgentID != "" || got.FencingToken != 0 || !got.LeaseDeadline.IsZero() || got.CancelRequested || got.Outputs != nil {
		t.Fatalf("fresh job has lease or result fields: %+v", got)
	}

	for _, tc := range []struct {
		name  string
		edit  func(*store.Job)
		code  errs.Code
		field string
	}{
		{"max attempts", func(j *store.Job) { j.MaxAttempts = 0 }, errs.Invalid, "max_attempts"},
		{"timeout", func(j *store.Job) { j.Timeout = 0 }, errs.Invalid, "timeout"},
		{"config", func(j *store.Job) { j.Config = []byte("{") }, errs.Invalid, "config"},
		{"unknown install", func(j *store.Job) { j.InstallID = "inst-nope" }, errs.NotFound, "inst-nope"},
		{"duplicate", func(j *store.Job) { j.ID = "job-1" }, errs.AlreadyExists, "job-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob("job-x", inst, T0)
			tc.edit(&j)
			wantErr(t, e.s.EnqueueJob(ctx, j), tc.code, tc.field)
		})
	}
	_, err := e.s.GetJob(ctx, "nope")
	wantErr(t, err, errs.NotFound, "nope")
}

func testEnqueueAssigned(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	e.agent(inst, "ag-1")
	e.agent(other, "ag-2")

	// Handed over at once: stored as a claim would have left it.
	j, assigned, err := e.s.EnqueueAssigned(ctx, newJob("job-1", inst, T0), "ag-1", at(time.Minute))
	ok(t, err)
	equal(t, "assigned", assigned, true)
	stored := e.job("job-1")
	equal(t, "state", stored.State, store.JobAssigned)
	equal(t, "attempt", stored.Attempt, 1)
	equal(t, "agent", stored.AgentID, "ag-1")
	equal(t, "lease", stored.LeaseDeadline, at(time.Minute))
	equal(t, "token", stored.FencingToken, j.FencingToken)
	equal(t, "component name", stored.Component, "network")
	equal(t, "returned state", j.State, store.JobAssigned)
	equal(t, "returned config", string(j.Config), `{"dir":"infra"}`)
	if j.FencingToken <= 0 {
		t.Fatalf("fencing token %d, want positive", j.FencingToken)
	}
	// The holder's writes go through; nothing is left to claim.
	err = e.s.AckJob(ctx, "job-1", writer(j), at(2*time.Minute), at(time.Second))
	ok(t, err)
	none, err := e.s.ClaimJobs(ctx, inst, store.Writer{AgentID: "ag-1"}, 5, at(time.Minute), T0)
	ok(t, err)
	equal(t, "claimable", len(none), 0)

	// An agent of another install, or none at all, never gets the job:
	// it is queued instead.
	for i, agent := range []string{"ag-2", "ag-nope"} {
		id := fmt.Sprintf("job-q%d", i)
		j, assigned, err := e.s.EnqueueAssigned(ctx, newJob(id, inst, T0), agent, at(time.Minute))
		ok(t, err)
		equal(t, "assigned to "+agent, assigned, false)
		equal(t, "returned state", j.State, store.JobQueued)
		got := e.job(id)
		equal(t, "state", got.State, store.JobQueued)
		if got.AgentID != "" || got.FencingToken != 0 || got.Attempt != 0 {
			t.Fatalf("queued job has lease fields: %+v", got)
		}
	}
	claimed := e.claimAll(inst, "ag-1")
	equal(t, "claimable", len(claimed), 2)
	equal(t, "claimed component name", claimed[0].Component, "network")

	// Refusals change nothing.
	_, _, err = e.s.EnqueueAssigned(ctx, newJob("job-1", inst, T0), "ag-1", at(time.Minute))
	wantErr(t, err, errs.AlreadyExists, "job-1")
	_, _, err = e.s.EnqueueAssigned(ctx, newJob("job-x", "inst-nope", T0), "ag-1", at(time.Minute))
	wantErr(t, err, errs.NotFound, "inst-nope")
	_, _, err = e.s.EnqueueAssigned(ctx, newJob("job-x", inst, T0), "ag-1", T0)
	wantErr(t, err, errs.Invalid, "lease_until")
	_, err = e.s.GetJob(ctx, "job-x")
	wantErr(t, err, errs.NotFound)
	equal(t, "job-1 state", e.job("job-1").State, store.JobRunning)
}

func testEnqueueJobs(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	e.agent(inst, "ag-1")
	e.agent(other, "ag-2")

	// One batch: assigned where the agent is the install's, queued where
	// it is another install's or none was given; returned in order.
	lease := at(time.Minute)
	jobs, err := e.s.EnqueueJobs(ctx, []store.NewJob{
		{Job: newJob("job-1", inst, T0), AgentID: "ag-1", LeaseUntil: lease},
		{Job: newJob("job-2", other, T0)},
		{Job: newJob("job-3", inst, T0), AgentID: "ag-2", LeaseUntil: lease},
	})
	ok(t, err)
	equal(t, "returned", len(jobs), 3)
	for i, want := range []store.JobState{store.JobAssigned, store.JobQueued, store.JobQueued} {
		id := fmt.Sprintf("job-%d", i+1)
		equal(t, id+" returned id", jobs[i].ID, id)
		equal(t, id+" returned state", jobs[i].State, want)
		equal(t, id+" stored state", e.job(id).State, want)
	}
	stored := e.job("job-1")
	equal(t, "agent", stored.AgentID, "ag-1")
	equal(t, "token", stored.FencingToken, jobs[0].FencingToken)
	equal(t, "lease", stored.LeaseDeadline, lease)
	ok(t, e.s.AckJob(ctx, "job-1", writer(jobs[0]), at(2*time.Minute), at(time.Second)))
	equal(t, "claimable", len(e.claimAll(inst, "ag-1")), 1)

	// All or none: a duplicate id, an unknown install or an invalid job
	// anywhere in the batch stores nothing, and the error says which job.
	for _, c := range []struct {
		bad  store.Job
		code errs.Code
		want string
	}{
		{newJob("job-2", inst, T0), errs.AlreadyExists, "jobs[1]: job \"job-2\" already exists"},
		{newJob("job-y", "inst-nope", T0), errs.NotFound, "jobs[1]: install \"inst-nope\" not found"},
		{func() store.Job { j := newJob("job-y", inst, T0); j.Operation = ""; return j }(), errs.Invalid, "jobs[1].operation"},
	} {
		_, err := e.s.EnqueueJobs(ctx, []store.NewJob{{Job: newJob("job-x", inst, T0), AgentID: "ag-1", LeaseUntil: lease}, {Job: c.bad}})
		wantErr(t, err, c.code, c.want)
		_, err = e.s.GetJob(ctx, "job-x")
		wantErr(t, err, errs.NotFound)
	}
	_, err = e.s.EnqueueJobs(ctx, nil)
	wantErr(t, err, errs.Invalid, "jobs")
	_, err = e.s.EnqueueJobs(ctx, make([]store.NewJob, store.MaxEnqueueBatch+1))
	wantErr(t, err, errs.Invalid, "at most")
}

// claimAll claims up to 100 queued jobs of installID for agentID.
func (e *env) claimAll(installID, agentID string) []store.Job {
	e.t.Helper()
	jobs, err := e.s.ClaimJobs(e.ctx(), installID, store.Writer{AgentID: agentID}, 100, at(time.Hour), at(time.Minute))
	ok(e.t, err)
	return jobs
}

func testClaimOrder(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	e.agent(inst, "ag-1")
	// Enqueued out of order; equal times are ordered by ID.
	e.enqueue("job-c", inst, at(3*time.Second))
	e.enqueue("job-b", inst, at(time.Second))
	e.enqueue("job-a2", inst, at(time.Second))
	e.enqueue("job-o", other, T0)

	now := at(time.Minute)
	w := store.Writer{AgentID: "ag-1"}
	got, err := e.s.ClaimJobs(ctx, inst, w, 2, now.Add(30*time.Second), now)
	ok(t, err)
	if len(got) != 2 || got[0].ID != "job-a2" || got[1].ID != "job-b" {
		t.Fatalf("claimed %v, want job-a2, job-b", ids(got))
	}
	for _, j := range got {
		equal(t, "state", j.State, store.JobAssigned)
		equal(t, "attempt", j.Attempt, 1)
		equal(t, "agent", j.AgentID, "ag-1")
		equal(t, "lease", j.LeaseDeadline, now.Add(30*time.Second))
		if j.FencingToken <= 0 {
			t.Fatalf("fencing token %d, want positive", j.FencingToken)
		}
		equal(t, "stored token", e.job(j.ID).FencingToken, j.FencingToken)
	}
	if got[0].FencingToken == got[1].FencingToken {
		t.Fatal("two jobs share a fencing token")
	}
	got, err = e.s.ClaimJobs(ctx, inst, w, 5, now.Add(30*time.Second), now)
	ok(t, err)
	equal(t, "second claim", strings.Join(ids(got), ","), "job-c")
	got, err = e.s.ClaimJobs(ctx, inst, w, 5, now.Add(30*time.Second), now)
	ok(t, err)
	equal(t, "third claim", len(got), 0)
	equal(t, "other install untouched", e.job("job-o").State, store.JobQueued)
}

func ids(jobs []store.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

func testClaimExclusive(t *testing.T, e *env) {
	inst := e.install("acme")
	const jobs = 60
	for i := range jobs {
		e.enqueue(fmt.Sprintf("job-%03d", i), inst, at(time.Duration(i)*time.Millisecond))
	}
	// Two replicas, four claimers each, claiming until the queue is empty.
	stores := []*store.Store{e.s, e.second()}
	var (
		mu      sync.Mutex
		claimed = map[string]string{}
		wg      sync.WaitGroup
		errc    = make(chan error, 8)
	)
	now := at(time.Minute)
	for i := range 8 {
		agent := fmt.Sprintf("ag-%d", i)
		wg.Go(func() {
			for {
				got, err := stores[i%2].ClaimJobs(e.ctx(), inst, store.Writer{AgentID: agent}, 3, now.Add(time.Minute), now)
				if err != nil {
					errc <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, j := range got {
					if prev, dup := claimed[j.ID]; dup {
						errc <- fmt.Errorf("job %s claimed by %s and %s", j.ID, prev, agent)
					}
					claimed[j.ID] = agent
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	equal(t, "jobs claimed", len(claimed), jobs)
	for id, agent := range claimed {
		j := e.job(id)
		if j.AgentID != agent || j.Attempt != 1 || j.State != store.JobAssigned {
			t.Fatalf("job %s = agent %s attempt %d state %s, want agent %s attempt 1 assigned", id, j.AgentID, j.Attempt, j.State, agent)
		}
	}
}

func testAckAndFinish(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	w := writer(j)

	ok(t, e.s.AckJob(ctx, "job-1", w, at(3*time.Minute), at(2*time.Minute)))
	acked := e.job("job-1")
	equal(t, "state", acked.State, store.JobRunning)
	equal(t, "started", acked.StartedAt, at(2*time.Minute))
	equal(t, "lease", acked.LeaseDeadline, at(3*time.Minute))
	ok(t, e.s.AckJob(ctx, "job-1", w, at(9*time.Minute), at(8*time.Minute)))
	again := e.job("job-1")
	equal(t, "re-ack started", again.StartedAt, at(2*time.Minute))
	equal(t, "re-ack lease", again.LeaseDeadline, at(3*time.Minute))

	_, err := e.s.FinishJob(ctx, "job-1", w, store.Result{State: store.JobRunning}, at(4*time.Minute))
	wantErr(t, err, errs.Invalid, "state")

	plan := []store.PlannedChange{
		{Address: "bucket.b1", Action: "create", After: json.RawMessage(`{"name":"b1"}`), Summary: "new"},
		{Address: "policy.p", Action: "update", Before: json.RawMessage(`{"n":1}`), After: json.RawMessage(`{"n":2}`)},
	}
	bad := store.Result{State: store.JobSucceeded, PlannedChanges: []store.PlannedChange{{Address: "x", Action: "create", After: json.RawMessage(`{`)}}}
	_, err = e.s.FinishJob(ctx, "job-1", w, bad, at(4*time.Minute))
	wantErr(t, err, errs.Invalid, "planned_changes[0]")
	res := store.Result{State: store.JobSucceeded, ExitCode: 0, Outputs: map[string]string{"url": "https://x"}, PlannedChanges: plan}
	changed, err := e.s.FinishJob(ctx, "job-1", w, res, at(4*time.Minute))
	ok(t, err)
	equal(t, "changed", changed, true)
	done := e.job("job-1")
	if !reflect.DeepEqual(done.PlannedChanges, plan) {
		t.Fatalf("planned changes %+v, want %+v", done.PlannedChanges, plan)
	}
	equal(t, "state", done.State, store.JobSucceeded)
	equal(t, "ended", done.EndedAt, at(4*time.Minute))
	equal(t, "output", done.Outputs["url"], "https://x")
	equal(t, "lease cleared", done.LeaseDeadline, time.Time{})

	// A resent result changes nothing and is not an error.
	res2 := store.Result{State: store.JobFailed, ExitCode: 3, Error: "boom"}
	changed, err = e.s.FinishJob(ctx, "job-1", w, res2, at(5*time.Minute))
	ok(t, err)
	equal(t, "resent changed", changed, false)
	resent := e.job("job-1")
	equal(t, "resent state", resent.State, store.JobSucceeded)
	equal(t, "resent ended", resent.EndedAt, at(4*time.Minute))

	err = e.s.AckJob(ctx, "job-1", w, at(9*time.Minute), at(8*time.Minute))
	wantErr(t, err, errs.Conflict, "already ended")

	// A failure records its exit code and error.
	e.enqueue("job-2", inst, T0)
	j2 := e.claimOne(inst, "ag-1", at(time.Minute))
	changed, err = e.s.FinishJob(ctx, "job-2", writer(j2), res2, at(2*time.Minute))
	ok(t, err)
	equal(t, "changed", changed, true)
	failed := e.job("job-2")
	equal(t, "failed state", failed.State, store.JobFailed)
	equal(t, "exit code", failed.ExitCode, 3)
	equal(t, "error", failed.Error, "boom")
	equal(t, "no planned changes", len(failed.PlannedChanges), 0)
	_, err = e.s.FinishJob(ctx, "nope", w, res, at(5*time.Minute))
	wantErr(t, err, errs.NotFound)
}

func testFencing(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	other := e.install("globex")
	e.agent(inst, "ag-1")
	e.agent(inst, "ag-2")
	e.agent(other, "ag-x")
	e.enqueue("job-1", inst, T0)
	j := e.claimOne(inst, "ag-1", at(time.Minute))
	stale := store.Writer{AgentID: "ag-1", FencingToken: j.FencingToken + 1}
	now := at(2 * time.Minute)

	writes := []struct {
		name string
		do   func(w store.Writer) error
	}{
		{"ack", func(w store.Writer) error {
			err := e.s.AckJob(ctx, "job-1", w, now.Add(time.Minute), now)
			return err
		}},
		{"logs", func(w store.Writer) error { return e.s.AppendLogs(ctx, "job-1", w, lines(1, 1, 3)) }},
		{"finish", func(w store.Writer) error {
			_, err := e.s.FinishJob(ctx, "job-1", w, store.Result{State: store.JobSucceeded}, now)
			return err
		}},
	}
	for _, wr := range writes {
		t.Run(wr.name, func(t *testing.T) {
			wantErr(t, wr.do(stale), errs.Conflict, "stale fencing token for job job-1: attempt 1 now holds the lease")
			for _, agent := range []string{"ag-2", "ag-x"} {
				err := wr.do(store.Writer{AgentID: agent, FencingToken: j.FencingToken})
				wantErr(t, err, errs.PermissionDenied, "job job-1 does not belong to this agent")
			}
			// Nothing was written.
			got := e.job("job-1")
			if got.State != store.JobAssigned || !got.LeaseDeadline.Equal(j.LeaseDeadline) || got.FencingToken != j.FencingToken {
				t.Fatalf("job changed by refused writes: %+v", got)
			}
			equal(t, "log lines", len(e.logs("job-1")), 0)
		})
	}
	// The holder can still write.
	err := e.s.AckJob(ctx, "job-1", writer(j), now.Add(time.Minute), now)
	ok(t, err)
}

func testLeaseExpiryRequeues(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.agent(inst, "ag-2")
	e.enqueue("job-1", inst, T0)
	first := e.claimOne(inst, "ag-1", at(time.Minute)) // lease until T0+2m
	err := e.s.AckJob(ctx, "job-1", writer(first), at(2*time.Minute), at(time.Minute))
	ok(t, err)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(first), lines(1, 1, 2)))

	// Not expired yet: the deadline itself is still inside the lease.
	changed, err := e.s.ExpireLeases(ctx, at(2*time.Minute))
	ok(t, err)
	equal(t, "expired before deadline", len(changed), 0)

	changed, err = e.s.ExpireLeases(ctx, at(2*time.Minute+time.Second))
	ok(t, err)
	if len(changed) != 1 || !changed[0].Requeued || changed[0].Job.ID != "job-1" {
		t.Fatalf("ExpireLeases = %+v, want job-1 requeued", changed)
	}
	q := e.job("job-1")
	equal(t, "state", q.State, store.JobQueued)
	equal(t, "attempt", q.Attempt, 1)
	equal(t, "agent", q.AgentID, "")
	if !q.LeaseDeadline.IsZero() {
		t.Fatalf("lease %v, want cleared", q.LeaseDeadline)
	}
	installs, err := e.s.QueuedJobInstalls(ctx)
	ok(t, err)
	equal(t, "queued installs", strings.Join(installs, ","), inst)

	// The requeued job cannot be written by its old holder.
	err = e.s.AckJob(ctx, "job-1", writer(first), at(4*time.Minute), at(3*time.Minute))
	wantErr(t, err, errs.Conflict, "stale fencing token")

	second := e.claimOne(inst, "ag-1", at(3*time.Minute))
	equal(t, "attempt", second.Attempt, 2)
	if second.FencingToken == first.FencingToken {
		t.Fatal("a new attempt kept the old fencing token")
	}
	// The same agent with attempt 1's token is a stale writer.
	_, err = e.s.FinishJob(ctx, "job-1", writer(first), store.Result{State: store.JobSucceeded}, at(3*time.Minute))
	wantErr(t, err, errs.Conflict, "stale fencing token for job job-1: attempt 2 now holds the lease")
	wantErr(t, e.s.AppendLogs(ctx, "job-1", writer(first), lines(1, 3, 4)), errs.Conflict, "attempt 2")

	ok(t, e.s.AppendLogs(ctx, "job-1", writer(second), lines(1, 1, 1))) // Attempt field ignored
	got := e.logs("job-1")
	equal(t, "lines", len(got), 3)
	equal(t, "last line attempt", got[2].Attempt, 2)
	_, err = e.s.FinishJob(ctx, "job-1", writer(second), store.Result{State: store.JobSucceeded}, at(4*time.Minute))
	ok(t, err)
	equal(t, "state", e.job("job-1").State, store.JobSucceeded)

	// Another agent of the install claims a requeued job just the same.
	e.enqueue("job-2", inst, T0)
	j := e.claimOne(inst, "ag-1", at(5*time.Minute))
	_, err = e.s.ExpireLeases(ctx, at(7*time.Minute))
	ok(t, err)
	j2 := e.claimOne(inst, "ag-2", at(8*time.Minute))
	equal(t, "attempt", j2.Attempt, 2)
	err = e.s.AckJob(ctx, "job-2", writer(j), at(9*time.Minute), at(8*time.Minute))
	wantErr(t, err, errs.Conflict, "stale fencing token")
}

// testExpiredRunningSaysWhy: a running job whose lease ran out on its last
// attempt says the agent stopped renewing it, with when it was last seen.
func testExpiredRunningSaysWhy(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	j := newJob("job-1", inst, T0)
	j.MaxAttempts = 1
	ok(t, e.s.EnqueueJob(ctx, j))
	c := e.claimOne(inst, "ag-1", at(time.Minute))
	ok(t, e.s.AckJob(ctx, "job-1", writer(c), at(2*time.Minute), at(time.Minute)))
	ok(t, e.s.TouchAgent(ctx, "ag-1", at(time.Minute)))
	changed, err := e.s.ExpireLeases(ctx, at(3*time.Minute))
	ok(t, err)
	if len(changed) != 1 {
		t.Fatalf("ExpireLeases changed %d jobs, want 1", len(changed))
	}
	want := "lease expired on attempt 1 of 1: agent ag-1 stopped renewing it (last seen " + at(time.Minute).UTC().Format(time.RFC3339) + ")"
	if !strings.HasPrefix(changed[0].Job.Error, want) {
		t.Fatalf("error = %q, want it to start with %q", changed[0].Job.Error, want)
	}
}

func testMaxAttempts(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	j := newJob("job-1", inst, T0)
	j.MaxAttempts = 2
	ok(t, e.s.EnqueueJob(ctx, j))
	for attempt := 1; attempt <= 2; attempt++ {
		now := at(time.Duration(attempt) * time.Hour)
		c := e.claimOne(inst, "ag-1", now)
		equal(t, "attempt", c.Attempt, attempt)
		changed, err := e.s.ExpireLeases(ctx, now.Add(2*time.Minute))
		ok(t, err)
		if len(changed) != 1 {
			t.Fatalf("ExpireLeases changed %d jobs, want 1", len(changed))
		}
		if attempt == 1 {
			equal(t, "requeued", changed[0].Requeued, true)
			continue
		}
		got := changed[0]
		equal(t, "requeued", got.Requeued, false)
		equal(t, "state", got.Job.State, store.JobFailed)
		// Claimed, never acked: the error says the agent never took it.
		if want := "lease expired on attempt 2 of 2: agent ag-1 never acknowledged the assignment"; !strings.HasPrefix(got.Job.Error, want) {
			t.Fatalf("error = %q, want it to start with %q", got.Job.Error, want)
		}
		equal(t, "ended", got.Job.EndedAt, now.Add(2*time.Minute))
		equal(t, "stored state", e.job("job-1").State, store.JobFailed)
		// The agent's late result is refused: the job ended without it.
		_, err = e.s.FinishJob(ctx, "job-1", writer(c), store.Result{State: store.JobSucceeded}, now.Add(3*time.Minute))
		wantErr(t, err, errs.Conflict, "job job-1 already ended")
	}
	claimed, err := e.s.ClaimJobs(ctx, inst, store.Writer{AgentID: "ag-1"}, 5, at(10*time.Hour), at(9*time.Hour))
	ok(t, err)
	equal(t, "claimable", len(claimed), 0)
}

func testTimeoutBackstop(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0) // 10m timeout
	c := e.claimOne(inst, "ag-1", T0)
	err := e.s.AckJob(ctx, "job-1", writer(c), at(time.Hour), T0)
	ok(t, err)
	// Lease kept alive, but past timeout + grace.
	changed, err := e.s.ExpireLeases(ctx, at(11*time.Minute))
	ok(t, err)
	equal(t, "changed within grace", len(changed), 0)
	changed, err = e.s.ExpireLeases(ctx, at(11*time.Minute+time.Second))
	ok(t, err)
	if len(changed) != 1 || changed[0].Requeued {
		t.Fatalf("ExpireLeases = %+v, want one job ended", changed)
	}
	got := changed[0].Job
	equal(t, "state", got.State, store.JobTimedOut)
	if !strings.Contains(got.Error, "10m0s timeout") || !strings.Contains(got.Error, "ag-1") {
		t.Fatalf("error %q should name the timeout and the agent", got.Error)
	}
}

func testRenewLeases(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.agent(inst, "ag-2")
	for _, id := range []string{"job-1", "job-2", "job-3", "job-4"} {
		e.enqueue(id, inst, T0)
	}
	j1 := e.claimOne(inst, "ag-1", T0)
	j2 := e.claimOne(inst, "ag-1", T0)
	j3 := e.claimOne(inst, "ag-2", T0)
	j4 := e.claimOne(inst, "ag-1", T0)
	_, err := e.s.FinishJob(ctx, j4.ID, writer(j4), store.Result{State: store.JobSucceeded}, T0)
	ok(t, err)
	renewed, lost, err := e.s.RenewLeases(ctx, "ag-1", []store.Lease{
		{JobID: j1.ID, FencingToken: j1.FencingToken},
		{JobID: j2.ID, FencingToken: j2.FencingToken + 1}, // stale
		{JobID: j3.ID, FencingToken: j3.FencingToken},     // another agent's
		{JobID: j4.ID, FencingToken: j4.FencingToken},     // finished
		{JobID: "job-nope", FencingToken: 1},
	}, at(time.Hour))
	ok(t, err)
	equal(t, "renewed", strings.Join(renewed, ","), j1.ID)
	equal(t, "lost", strings.Join(lost, ","), strings.Join([]string{j2.ID, j3.ID, j4.ID, "job-nope"}, ","))
	equal(t, "renewed lease", e.job(j1.ID).LeaseDeadline, at(time.Hour))
	equal(t, "stale lease", e.job(j2.ID).LeaseDeadline, j2.LeaseDeadline)
	equal(t, "other's lease", e.job(j3.ID).LeaseDeadline, j3.LeaseDeadline)
}

func testCancel(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")

	t.Run("queued", func(t *testing.T) {
		e.enqueue("job-q", inst, T0)
		got, err := e.s.RequestCancel(ctx, "job-q", "operator changed their mind", "ops", at(time.Minute))
		ok(t, err)
		equal(t, "state", got.State, store.JobCancelled)
		equal(t, "ended", got.EndedAt, at(time.Minute))
		equal(t, "error", got.Error, "operator changed their mind")
		again, err := e.s.RequestCancel(ctx, "job-q", "again", "ops", at(2*time.Minute))
		ok(t, err)
		equal(t, "cancelled as is", again.EndedAt, at(time.Minute))
		equal(t, "cancelled as is", again.Error, "operator changed their mind")
	})
	t.Run("running", func(t *testing.T) {
		e.enqueue("job-r", inst, at(time.Second))
		c := e.claimOne(inst, "ag-1", at(time.Minute))
		err := e.s.AckJob(ctx, "job-r", writer(c), at(2*time.Minute), at(time.Minute))
		ok(t, err)
		got, err := e.s.RequestCancel(ctx, "job-r", "stop", "ops", at(time.Minute))
		ok(t, err)
		equal(t, "state", got.State, store.JobRunning)
		equal(t, "cancel requested", got.CancelRequested, true)
		equal(t, "reason", got.CancelReason, "stop")
		// The agent reports it stopped.
		_, err = e.s.FinishJob(ctx, "job-r", writer(c), store.Result{State: store.JobCancelled, Error: "stop"}, at(90*time.Second))
		ok(t, err)
		equal(t, "state", e.job("job-r").State, store.JobCancelled)
	})
	t.Run("running, agent gone", func(t *testing.T) {
		e.enqueue("job-g", inst, at(2*time.Second))
		e.claimOne(inst, "ag-1", at(time.Minute))
		_, err := e.s.RequestCancel(ctx, "job-g", "stop", "ops", at(time.Minute))
		ok(t, err)
		changed, err := e.s.ExpireLeases(ctx, at(3*time.Minute))
		ok(t, err)
		if len(changed) != 1 || changed[0].Job.State != store.JobCancelled || changed[0].Requeued {
			t.Fatalf("ExpireLeases = %+v, want job-g cancelled", changed)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		e.enqueue("job-s", inst, at(3*time.Second))
		c := e.claimOne(inst, "ag-1", at(time.Minute))
		_, err := e.s.FinishJob(ctx, "job-s", writer(c), store.Result{State: store.JobSucceeded}, at(time.Minute))
		ok(t, err)
		_, err = e.s.RequestCancel(ctx, "job-s", "late", "ops", at(2*time.Minute))
		wantErr(t, err, errs.Conflict, "job job-s already succeeded")
	})
	t.Run("unknown", func(t *testing.T) {
		_, err := e.s.RequestCancel(ctx, "nope", "", "ops", at(time.Minute))
		wantErr(t, err, errs.NotFound)
	})
}

func testLogs(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	c := e.claimOne(inst, "ag-1", T0)
	w := writer(c)

	batch := lines(1, 1, 5)
	ok(t, e.s.AppendLogs(ctx, "job-1", w, batch))
	ok(t, e.s.AppendLogs(ctx, "job-1", w, batch)) // resent after a reconnect
	ok(t, e.s.AppendLogs(ctx, "job-1", w, lines(1, 4, 7)))
	got := e.logs("job-1")
	equal(t, "lines", len(got), 7)
	for i, l := range got {
		equal(t, "seq", l.Seq, int64(i+1))
		equal(t, "attempt", l.Attempt, 1)
		equal(t, "text", l.Text, fmt.Sprintf("line %d", i+1))
		equal(t, "time", l.Time, at(time.Duration(i+1)*time.Millisecond))
	}

	// Attempt 2 follows attempt 1 whatever the seqs.
	_, err := e.s.ExpireLeases(ctx, at(time.Hour))
	ok(t, err)
	c2 := e.claimOne(inst, "ag-1", at(time.Hour))
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), []store.LogLine{
		{Seq: 1, Time: at(time.Hour), Stream: 3, Text: "retrying"},
		{Seq: 2, Time: at(time.Hour), Stream: 2, Text: "bad \xff byte and a \x00 NUL"},
	}))
	page, err := e.s.ListLogs(ctx, "job-1", 1, 6, 2)
	ok(t, err)
	if len(page) != 2 || page[0].Attempt != 1 || page[0].Seq != 7 || page[1].Attempt != 2 || page[1].Seq != 1 {
		t.Fatalf("ListLogs after (1, 6) = %+v, want (1,7), (2,1)", page)
	}
	equal(t, "stream", page[1].Stream, 3)
	page, err = e.s.ListLogs(ctx, "job-1", 2, 1, 10)
	ok(t, err)
	if len(page) != 1 || page[0].Text != "bad \uFFFD byte and a \uFFFD NUL" {
		t.Fatalf("ListLogs after (2, 1) = %+v", page)
	}
	page, err = e.s.ListLogs(ctx, "job-1", 2, 2, 10)
	ok(t, err)
	equal(t, "lines after the end", len(page), 0)

	// Large batches are chunked and still stored once.
	big := lines(2, 10, 1400)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), big))
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), big))
	all, err := e.s.ListLogs(ctx, "job-1", 0, 0, 5000)
	ok(t, err)
	equal(t, "all lines", len(all), 7+2+1391)

	wantErr(t, e.s.AppendLogs(ctx, "job-1", writer(c2), []store.LogLine{{Seq: 9, Stream: 7}}), errs.Invalid, "stream")
	_, err = e.s.ListLogs(ctx, "nope", 0, 0, 10)
	wantErr(t, err, errs.NotFound)
	e.enqueue("job-2", inst, T0)
	none, err := e.s.ListLogs(ctx, "job-2", 0, 0, 10)
	ok(t, err)
	equal(t, "lines of a fresh job", len(none), 0)
}

func testListJobs(t *testing.T, e *env) {
	ctx := e.ctx()
	a := e.install("acme")
	b := e.install("globex")
	e.agent(a, "ag-1")
	var want []string // newest first
	for i := range 25 {
		id := fmt.Sprintf("job-%02d", i)
		inst := a
		if i%3 == 0 {
			inst = b
		}
		// Pairs share a creation time, so the ID breaks ties.
		e.enqueue(id, inst, at(time.Duration(i/2)*time.Second))
		want = append([]string{id}, want...)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		page, next, err := e.s.ListJobs(ctx, store.JobFilter{Limit: 10, Cursor: cursor})
		ok(t, err)
		got = append(got, ids(page)...)
		if next == "" {
			break
		}
		cursor = next
	}
	equal(t, "all jobs", strings.Join(got, ","), strings.Join(want, ","))

	page, next, err := e.s.ListJobs(ctx, store.JobFilter{InstallID: b})
	ok(t, err)
	equal(t, "next", next, "")
	equal(t, "jobs of b", strings.Join(ids(page), ","), "job-24,job-21,job-18,job-15,job-12,job-09,job-06,job-03,job-00")

	e.claimOne(a, "ag-1", at(time.Hour)) // job-01
	page, _, err = e.s.ListJobs(ctx, store.JobFilter{States: []store.JobState{store.JobAssigned, store.JobRunning}})
	ok(t, err)
	equal(t, "assigned jobs", strings.Join(ids(page), ","), "job-01")

	_, _, err = e.s.ListJobs(ctx, store.JobFilter{Cursor: "garbage!"})
	wantErr(t, err, errs.Invalid, "cursor")
	_, _, err = e.s.ListJobs(ctx, store.JobFilter{Limit: 1001})
	wantErr(t, err, errs.Invalid, "limit")
	_, _, err = e.s.ListJobs(ctx, store.JobFilter{States: []store.JobState{"lost"}})
	wantErr(t, err, errs.Invalid, "states[0]")
}

func testQueuedJobInstalls(t *testing.T, e *env) {
	ctx := e.ctx()
	a := e.install("acme")
	b := e.install("globex")
	e.install("initech")
	e.agent(a, "ag-1")
	got, err := e.s.QueuedJobInstalls(ctx)
	ok(t, err)
	equal(t, "none", len(got), 0)
	e.enqueue("job-1", a, T0)
	e.enqueue("job-2", b, T0)
	e.enqueue("job-3", b, T0)
	got, err = e.s.QueuedJobInstalls(ctx)
	ok(t, err)
	equal(t, "installs", strings.Join(got, ","), strings.Join([]string{a, b}, ","))
	e.claimOne(a, "ag-1", T0)
	got, err = e.s.QueuedJobInstalls(ctx)
	ok(t, err)
	equal(t, "installs", strings.Join(got, ","), b)
}

func testRestart(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	ok(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-1", Name: "ci", Role: store.RoleAdmin, CreatedAt: T0}, "h1"))
	e.enqueue("job-1", inst, T0)
	e.enqueue("job-2", inst, at(time.Second))
	c := e.claimOne(inst, "ag-1", T0)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c), lines(1, 1, 3)))
	before := e.job("job-1")
	ok(t, e.s.Close())

	s := e.reopen()
	t.Cleanup(func() { s.Close() })
	e.s = s
	if _, err := s.GetApp(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetInstall(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	a, err := s.GetAgent(ctx, "ag-1")
	ok(t, err)
	equal(t, "agent install", a.InstallID, inst)
	_, err = s.APITokenByHash(ctx, "h1")
	ok(t, err)
	after := e.job("job-1")
	if !slices.Equal(after.Config, before.Config) || after.FencingToken != before.FencingToken || after.State != before.State || !after.LeaseDeadline.Equal(before.LeaseDeadline) {
		t.Fatalf("job changed across restart:\nbefore %+v\nafter  %+v", before, after)
	}
	equal(t, "log lines", len(e.logs("job-1")), 3)
	// The agent carries on with its lease.
	ok(t, s.AppendLogs(ctx, "job-1", writer(c), lines(1, 3, 4)))
	_, err = s.FinishJob(ctx, "job-1", writer(c), store.Result{State: store.JobSucceeded}, at(time.Minute))
	ok(t, err)
	equal(t, "log lines", len(e.logs("job-1")), 4)
	equal(t, "next claim", e.claimOne(inst, "ag-1", at(time.Minute)).ID, "job-2")
	// The used enrolment token stays used.
	_, err = s.Enroll(ctx, "hash-ag-1", store.Agent{ID: "ag-2", PublicKey: []byte{1}}, at(time.Minute))
	wantErr(t, err, errs.PermissionDenied, "already used")
}

func testListen(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	if e.s.Dialect() != store.DialectPostgres {
		// One process wakes itself: Listen has nothing to do.
		ok(t, e.s.Listen(ctx, func(string) {}, func(string) {}))
		return
	}
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	jobc, logc := make(chan string, 100), make(chan string, 100)
	done := make(chan error, 1)
	// Notifications come from another replica.
	other := e.second()
	go func() { done <- e.s.Listen(ctx, func(id string) { jobc <- id }, func(id string) { logc <- id }) }()

	// LISTEN starts asynchronously; keep making changes until one arrives.
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		ok(t, other.EnqueueJob(ctx, newJob(fmt.Sprintf("job-%d", i), inst, T0)))
		select {
		case id := <-jobc:
			equal(t, "install woken", id, inst)
		case <-time.After(100 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("no job notification within 10s")
		}
		break
	}
	jobs, err := other.ClaimJobs(ctx, inst, store.Writer{AgentID: "ag-1"}, 1, at(time.Minute), T0)
	ok(t, err)
	ok(t, other.AppendLogs(ctx, jobs[0].ID, writer(jobs[0]), lines(1, 1, 1)))
	select {
	case id := <-logc:
		equal(t, "job woken", id, jobs[0].ID)
	case <-time.After(10 * time.Second):
		t.Fatal("no log notification within 10s")
	}
	cancel()
	select {
	case err := <-done:
		ok(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after its context ended")
	}
}

func testLogsBefore(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	c := e.claimOne(inst, "ag-1", T0)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c), lines(1, 1, 10)))
	_, err := e.s.ExpireLeases(ctx, at(time.Hour))
	ok(t, err)
	c2 := e.claimOne(inst, "ag-1", at(time.Hour))
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), lines(2, 1, 3)))

	seqs := func(ls []store.LogLine) string {
		var out []string
		for _, l := range ls {
			out = append(out, fmt.Sprintf("%d.%d", l.Attempt, l.Seq))
		}
		return strings.Join(out, " ")
	}
	tail, err := e.s.ListLogsBefore(ctx, "job-1", 0, 0, 4)
	ok(t, err)
	equal(t, "last 4 lines, oldest first", seqs(tail), "1.10 2.1 2.2 2.3")
	page, err := e.s.ListLogsBefore(ctx, "job-1", 2, 1, 3)
	ok(t, err)
	equal(t, "3 before 2.1 (across attempts)", seqs(page), "1.8 1.9 1.10")
	page, err = e.s.ListLogsBefore(ctx, "job-1", 1, 3, 10)
	ok(t, err)
	equal(t, "before 1.3", seqs(page), "1.1 1.2")
	page, err = e.s.ListLogsBefore(ctx, "job-1", 1, 1, 10)
	ok(t, err)
	equal(t, "before the first line", len(page), 0)
}

func testFleet(t *testing.T, e *env) {
	ctx := e.ctx()
	a := e.install("acme")
	b := e.install("globex")
	e.install("initech")
	e.agent(a, "ag-old")
	e.agent(a, "ag-new")
	e.agent(b, "ag-b")
	e.enqueue("job-1", a, T0)
	e.enqueue("job-2", a, at(time.Second))
	e.enqueue("job-3", a, at(2*time.Second))
	e.enqueue("job-4", b, T0)
	e.claimOne(a, "ag-new", at(time.Minute))
	cb := e.claimOne(b, "ag-b", at(time.Minute))
	_, err := e.s.FinishJob(ctx, cb.ID, writer(cb), store.Result{State: store.JobSucceeded}, at(2*time.Minute))
	ok(t, err)

	fs, err := e.s.Fleet(ctx, "")
	ok(t, err)
	equal(t, "installs", len(fs.Installs), 3)
	equal(t, "acme agents", len(fs.Agents[a]), 2)
	equal(t, "globex agents", len(fs.Agents[b]), 1)
	equal(t, "acme queued", fs.Queued[a], 2)
	equal(t, "acme active", fs.Active[a], 1)
	equal(t, "globex queued (its job ended)", fs.Queued[b], 0)
	equal(t, "globex active", fs.Active[b], 0)

	fs, err = e.s.Fleet(ctx, "no-such-app")
	ok(t, err)
	equal(t, "installs of another app", len(fs.Installs), 0)
}
