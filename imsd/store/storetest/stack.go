package storetest

import (
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// testAgentStack: what an agent reports of its install stack is kept with
// the agent (never with the install's inputs, which app pushes rewrite),
// with an audit record, and read back by every replica.
func testAgentStack(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	a, err := e.s.GetAgent(ctx, "ag-1")
	ok(t, err)
	if a.Stack != nil {
		t.Fatalf("stack before any report: %+v", a.Stack)
	}
	r := store.StackReport{Format: "cloudformation", Stack: "acme-byoc",
		Inputs: map[string]string{"admin_email": "set", "region": "eu-west-1"}, Outputs: map[string]string{"RegistryUri": "1.dkr.ecr/x"}}
	ok(t, e.s.SetAgentStack(ctx, "ag-1", r, at(time.Minute)))
	wantErr(t, e.s.SetAgentStack(ctx, "ag-nobody", r, at(time.Minute)), errs.NotFound, "ag-nobody")
	_, err = e.s.UpdateInstall(ctx, inst, map[string]string{"size": "3"}, store.InstallSettings{}, at(2*time.Minute))
	ok(t, err)
	for _, s := range []*store.Store{e.s, e.second()} {
		a, err := s.GetAgent(ctx, "ag-1")
		ok(t, err)
		if a.Stack == nil || !a.Stack.Equal(r) || !a.Stack.ReportedAt.Equal(at(time.Minute)) {
			t.Fatalf("stack = %+v, want %+v", a.Stack, r)
		}
		fs, err := s.Fleet(ctx, "")
		ok(t, err)
		if got := fs.Agents[inst][0].Stack; got == nil || !got.Equal(r) {
			t.Fatalf("fleet stack = %+v", got)
		}
	}
	wantKinds(t, "stack report", e.kinds(inst), "agent.stack_reported")
}
