// Conformance, installs: installs, agent enrolment (one use per token,
// also under concurrency) and agents.

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
