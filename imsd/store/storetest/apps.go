// Conformance, apps: operator API tokens, apps and app revisions.

package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

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

	// Scoped, expiring tokens; names are unique among unrevoked tokens;
	// revoking (by name) is audited with its actor; last use is recorded.
	exp := T0.Add(30 * 24 * time.Hour)
	ok(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-5", Name: "ci-deploy", Role: store.RoleOperator, Scope: "app:vault",
		ExpiresAt: exp, CreatedBy: "token:ci", CreatedAt: T0}, "h5"))
	wantErr(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-6", Name: "ci-deploy", Role: store.RoleSupport, CreatedAt: T0}, "h6"), errs.AlreadyExists)
	ok(t, e.s.TouchAPIToken(ctx, "tok-5", T0.Add(time.Minute)))
	toks, err := e.s.ListAPITokens(ctx)
	ok(t, err)
	equal(t, "tokens", len(toks), 3)
	want5 := store.APIToken{ID: "tok-5", Name: "ci-deploy", Role: store.RoleOperator, Scope: "app:vault", ExpiresAt: exp,
		LastUsedAt: T0.Add(time.Minute), CreatedBy: "token:ci", CreatedAt: T0}
	if toks[1] != want5 {
		t.Fatalf("ListAPITokens[1] = %+v, want %+v", toks[1], want5)
	}
	rev, err := e.s.RevokeAPIToken(ctx, "ci-deploy", "user:ann@example.com", T0.Add(time.Hour))
	ok(t, err)
	equal(t, "revoked", rev.ID, "tok-5")
	_, err = e.s.APITokenByHash(ctx, "h5")
	wantErr(t, err, errs.NotFound)
	_, err = e.s.RevokeAPIToken(ctx, "ci-deploy", "x", T0)
	wantErr(t, err, errs.NotFound)
	ok(t, e.s.CreateAPIToken(ctx, store.APIToken{ID: "tok-7", Name: "ci-deploy", Role: store.RoleSupport, CreatedAt: T0}, "h7"))
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: store.VendorChain, OneChain: true})
	ok(t, err)
	var kinds []string
	for _, ev := range evs {
		if ev.Subject == "token:ci-deploy" {
			kinds = append(kinds, ev.Kind+" by "+ev.Actor)
		}
	}
	equal(t, "token audit", strings.Join(kinds, "; "), "token.created by token:ci; token.revoked by user:ann@example.com; token.created by ")
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
