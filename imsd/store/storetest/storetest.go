// Package storetest is the conformance suite every store backend passes
// (SQLite and PostgreSQL): the same behaviour, checked the same way,
// including a simulated restart.
//
// This file holds Run, the list of tests, and the fixtures they share; the
// tests live in one file per domain, the jobs ones named after the store
// file they check (jobs_lease.go checks the store's jobs_lease.go).
package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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
		{"InstallLabels", testInstallLabels},
		{"WindowBoundHold", testWindowBoundHold},
		{"Enroll", testEnroll},
		{"EnrollConcurrent", testEnrollConcurrent},
		{"Agents", testAgents},
		{"EnqueueAndGet", testEnqueueAndGet},
		{"EnqueueAssigned", testEnqueueAssigned},
		{"EnqueueJobs", testEnqueueJobs},
		{"EnqueueKeys", testEnqueueKeys},
		{"EnqueueKeysConcurrent", testEnqueueKeysConcurrent},
		{"BatchedRefusals", testBatchedRefusals},
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
		{"LogCap", testLogCap},
		{"LogCapReplicas", testLogCapReplicas},
		{"LogPrune", testLogPrune},
		{"LogPruneReplicas", testLogPruneReplicas},
		{"LogPruneRerun", testLogPruneRerun},
		{"Fleet", testFleet},
		{"ListJobs", testListJobs},
		{"QueuedJobInstalls", testQueuedJobInstalls},
		{"Restart", testRestart},
		{"Listen", testListen},
		{"WorkflowLifecycle", testWorkflowLifecycle},
		{"WorkflowApproveCancel", testWorkflowApproveCancel},
		{"Releases", testReleases},
		{"AgentRollouts", testAgentRollouts},
		{"AgentRolloutCancel", testAgentRolloutCancel},
		{"TriggerTicks", testTriggerTicks},
		{"ActionRunsAndHealth", testActionRunsAndHealth},
		{"Modes", testModes},
		{"AgentPermissions", testAgentPermissions},
		{"AgentStack", testAgentStack},
		{"AgentHealth", testAgentHealth},
		{"AgentDisconnected", testAgentDisconnected},
		{"AlertOutbox", testAlertOutbox},
		{"RevokeAgents", testRevokeAgents},
		{"AgentKeyRotation", testAgentKeyRotation},
		{"BreakGlass", testBreakGlass},
		{"SessionRecordings", testSessionRecordings},
		{"SupportSessionEndsOnce", testSupportSessionEndsOnce},
		{"RecordingKeptOnce", testRecordingKeptOnce},
		{"LostSupportSessions", testLostSupportSessions},
		{"AuditEvents", testAuditEvents},
		{"AuditAppendOnly", testAuditAppendOnly},
		{"AuditTamperEdit", testAuditTamperEdit},
		{"AuditTamperDelete", testAuditTamperDelete},
		{"AuditTamperInsert", testAuditTamperInsert},
		{"AuditWriteFailure", testAuditWriteFailure},
		{"AuditConcurrent", testAuditConcurrent},
		{"AuditRecordsAfter", testAuditRecordsAfter},
		{"CallRecordInWrite", testCallRecordInWrite},
		{"PolicyFindings", testPolicyFindings},
		{"ArtifactVerifications", testArtifactVerifications},
		{"Drift", testDrift},
		{"ComponentImport", testComponentImport},
		{"OfflineStep", testOfflineStep},
		{"OfflineWorkflow", testOfflineWorkflow},
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

// racing runs write from 8 goroutines at once, half on e.s and half on a
// second store on the same database (a second replica), and returns how
// many said they wrote: the test of a write that must happen once across
// replicas. An error fails the test.
func (e *env) racing(write func(s *store.Store, second bool) (bool, error)) int {
	e.t.Helper()
	var n atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		s := e.s
		if i%2 == 1 {
			s = e.second()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrote, err := write(s, i%2 == 1)
			if err != nil {
				e.t.Error(err)
			}
			if wrote {
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(n.Load())
}

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

func ids(jobs []store.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}
