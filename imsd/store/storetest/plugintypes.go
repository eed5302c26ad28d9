package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func testPluginTypes(t *testing.T, e *env) {
	ctx := e.ctx()
	types, err := e.s.ListPluginTypes(ctx)
	ok(t, err)
	equal(t, "types at first", len(types), 0)
	_, err = e.s.GetPluginType(ctx, "greeting")
	wantErr(t, err, errs.NotFound, `component type "greeting" is not registered`)

	v1 := store.PluginType{Type: "greeting", Version: "0.1.0", Protocol: "1.1", Description: `{"type":"greeting","version":"0.1.0"}`,
		ConfigSchema: `{"type":"object"}`, RegisteredAt: T0, RegisteredBy: "admin"}
	_, replaced, err := e.s.PutPluginType(ctx, v1)
	ok(t, err)
	equal(t, "first registration replaced", replaced, false)
	_, _, err = e.s.PutPluginType(ctx, store.PluginType{Type: "alpha", Version: "1", Protocol: "1.0", Description: "{}", RegisteredAt: T0})
	ok(t, err)
	got, err := e.s.GetPluginType(ctx, "greeting")
	ok(t, err)
	equal(t, "greeting", got, v1)

	// A newer description replaces the type's: only the latest is kept.
	v2 := v1
	v2.Version, v2.ConfigSchema, v2.Description, v2.RegisteredAt, v2.RegisteredBy = "0.2.0", "", `{"type":"greeting","version":"0.2.0"}`, at(time.Minute), "ci"
	prev, replaced, err := e.s.PutPluginType(ctx, v2)
	ok(t, err)
	equal(t, "second registration replaced", replaced, true)
	equal(t, "replaced version", prev.Version, "0.1.0")
	types, err = e.s.ListPluginTypes(ctx)
	ok(t, err)
	if len(types) != 2 || types[0].Type != "alpha" || types[1] != v2 {
		t.Fatalf("ListPluginTypes = %+v, want alpha then greeting 0.2.0", types)
	}

	// Concurrent registrations of one type leave one row, one of theirs.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			p := v2
			p.Version = string(rune('a' + i))
			if _, _, err := e.s.PutPluginType(ctx, p); err != nil {
				t.Errorf("concurrent put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	types, err = e.s.ListPluginTypes(ctx)
	ok(t, err)
	equal(t, "types after concurrent puts", len(types), 2)

	ok(t, e.s.DeletePluginType(ctx, "greeting", T0))
	wantErr(t, e.s.DeletePluginType(ctx, "greeting", T0), errs.NotFound, `"greeting" is not registered`)
	_, err = e.s.GetPluginType(ctx, "greeting")
	wantErr(t, err, errs.NotFound)

	// Registrations survive a restart.
	got, err = e.second().GetPluginType(ctx, "alpha")
	ok(t, err)
	equal(t, "alpha after reopen", got.Protocol, "1.0")

	_, _, err = e.s.PutPluginType(ctx, store.PluginType{Type: "x", Version: "1", Description: "{}"})
	wantErr(t, err, errs.Invalid, "registered_at")
	_, _, err = e.s.PutPluginType(ctx, store.PluginType{Version: "1", Description: "{}", RegisteredAt: T0})
	wantErr(t, err, errs.Invalid, "type")
}
