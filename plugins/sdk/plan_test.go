package sdk_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

// planner plans the changes it is given.
type planner struct {
	fake
	changes []sdk.PlannedChange
}

func (p planner) Plan(context.Context, *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{Changes: "two changes", PlannedChanges: p.changes}, nil
}

// Planned changes reach the host with their sensitive values masked (a
// changed one marked as changed), and the plugin's own values untouched.
func TestPlannedChanges(t *testing.T) {
	before := map[string]any{"name": "db", "auth": map[string]any{"password": "old-pw", "user": "app"}, "key": "k"}
	after := map[string]any{"name": "db", "auth": map[string]any{"password": "new-pw", "user": "app"}, "key": "k"}
	p := planner{changes: []sdk.PlannedChange{
		{Address: "db.main", Action: sdk.ActionUpdate, Before: before, After: after, Sensitive: []string{"auth.password", "key"}, Summary: "rotate"},
		{Address: "secret.s", Action: sdk.ActionCreate, After: "s3cr3t", Sensitive: []string{""}},
		{Address: "old.thing", Action: sdk.ActionDelete, Before: map[string]any{"n": 1.0}},
	}}
	res, _ := sdktest.Run(t, sdktest.Start(t, p), sdk.OpPlan, &sdk.RunRequest{})
	if res.Err() != nil || len(res.PlannedChanges) != 3 {
		t.Fatalf("result %+v", res)
	}
	got := res.PlannedChanges
	wantBefore := map[string]any{"name": "db", "auth": map[string]any{"password": sdk.Masked, "user": "app"}, "key": sdk.Masked}
	wantAfter := map[string]any{"name": "db", "auth": map[string]any{"password": sdk.MaskedChanged, "user": "app"}, "key": sdk.Masked}
	if !reflect.DeepEqual(got[0].Before, wantBefore) || !reflect.DeepEqual(got[0].After, wantAfter) || got[0].String() != "update db.main: rotate" {
		t.Errorf("update: %+v", got[0])
	}
	if got[1].After != sdk.Masked || got[1].Before != nil {
		t.Errorf("create of a sensitive value: %+v", got[1])
	}
	if got[2].After != nil || got[2].Before.(map[string]any)["n"] != 1.0 {
		t.Errorf("delete: %+v", got[2])
	}
	if before["auth"].(map[string]any)["password"] != "old-pw" || after["key"] != "k" {
		t.Errorf("the plugin's values were changed: %v %v", before, after)
	}

	bad := planner{changes: []sdk.PlannedChange{{Address: "x", Action: "upsert"}}}
	res, _ = sdktest.Run(t, sdktest.Start(t, bad), sdk.OpPlan, &sdk.RunRequest{})
	if err := res.Err(); err == nil || !strings.Contains(err.Error(), `planned change 0 (x): action "upsert": want create, update, delete or replace`) {
		t.Errorf("bad action: %v", err)
	}
	sdktest.Test(t, p, sdktest.Case{Steps: []sdktest.Step{
		{Op: sdk.OpPlan, Config: map[string]any{}, Check: sdktest.All(sdktest.ExpectPlannedChange(sdk.ActionDelete, "old.thing"), sdktest.ExpectChanges("two changes"))},
	}})
}

// PlanDigest is over the masked changes, so a plugin computes what the
// host does from what it received.
func TestPlanDigestMasked(t *testing.T) {
	a := []sdk.PlannedChange{{Address: "db", Action: sdk.ActionUpdate, Before: map[string]any{"password": "old"},
		After: map[string]any{"password": "new"}, Sensitive: []string{"password"}}}
	b := []sdk.PlannedChange{{Address: "db", Action: sdk.ActionUpdate, Before: map[string]any{"password": "x"},
		After: map[string]any{"password": "y"}, Sensitive: []string{"password"}}}
	da, err := sdk.PlanDigest(a)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := sdk.PlanDigest(b)
	if da != db {
		t.Fatalf("digests of plans that differ only in masked values: %s vs %s", da, db)
	}
	host, _ := sdk.PlanDigestOf([]sdk.PlannedChange{{Address: "db", Action: sdk.ActionUpdate,
		Before: map[string]any{"password": sdk.Masked}, After: map[string]any{"password": sdk.MaskedChanged}}})
	if host != da {
		t.Fatalf("the host's digest of the masked changes is %s, the plugin's %s", host, da)
	}
	if _, err := sdk.PlanDigest([]sdk.PlannedChange{{Address: "x", Action: "frob"}}); err == nil {
		t.Fatal("an unknown action was digested")
	}
}
