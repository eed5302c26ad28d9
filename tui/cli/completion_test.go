package cli

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// completeFake adds workflows, app revisions and break-glass roles to the
// fake server.
type completeFake struct{ *fakeOperator }

func (f completeFake) ListWorkflows(ctx context.Context, req *connect.Request[imsv1.ListWorkflowsRequest]) (*connect.Response[imsv1.ListWorkflowsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&imsv1.ListWorkflowsResponse{Workflows: []*imsv1.Workflow{
		{Id: "wf_2", InstallId: "ins_1", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, State: imsv1.WorkflowState_WORKFLOW_STATE_RUNNING},
		{Id: "wf_1", InstallId: "ins_2", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE, State: imsv1.WorkflowState_WORKFLOW_STATE_FAILED},
	}}), nil
}

func (f completeFake) ListAppRevisions(ctx context.Context, req *connect.Request[imsv1.ListAppRevisionsRequest]) (*connect.Response[imsv1.ListAppRevisionsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	if a := req.Msg.GetApp(); a != "shop" && a != "app_1" {
		return nil, connect.NewError(connect.CodeNotFound, errString("no app "+a))
	}
	return connect.NewResponse(&imsv1.ListAppRevisionsResponse{Revisions: []*imsv1.AppRevision{
		{AppId: "app_1", Number: 12, Version: "1.4.0", CreateTime: testTime},
		{AppId: "app_1", Number: 11, Version: "1.3.2", CreateTime: testTime},
	}}), nil
}

func (f completeFake) GetBreakGlassPolicy(ctx context.Context, req *connect.Request[imsv1.GetBreakGlassPolicyRequest]) (*connect.Response[imsv1.GetBreakGlassPolicyResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&imsv1.GetBreakGlassPolicyResponse{Roles: []*imsv1.BreakGlassRole{
		{Name: "admin", Description: "full access"}, {Name: "readonly", Description: "look only"},
	}}), nil
}

func (f completeFake) ListReleases(ctx context.Context, req *connect.Request[imsv1.ListReleasesRequest]) (*connect.Response[imsv1.ListReleasesResponse], error) {
	return connect.NewResponse(&imsv1.ListReleasesResponse{Releases: []*imsv1.Release{
		{Id: "rel_2", AppName: "shop", AppRevision: 12, State: imsv1.ReleaseState_RELEASE_STATE_RUNNING},
	}}), nil
}

func (f completeFake) ListApiTokens(ctx context.Context, req *connect.Request[imsv1.ListApiTokensRequest]) (*connect.Response[imsv1.ListApiTokensResponse], error) {
	return connect.NewResponse(&imsv1.ListApiTokensResponse{Tokens: []*imsv1.ApiToken{
		{Id: "tok_1", Name: "ci-deploy", Grant: &imsv1.RoleGrant{Role: imsv1.Role_ROLE_OPERATOR}},
	}}), nil
}

func (f completeFake) ListPluginTypes(ctx context.Context, req *connect.Request[imsv1.ListPluginTypesRequest]) (*connect.Response[imsv1.ListPluginTypesResponse], error) {
	return connect.NewResponse(&imsv1.ListPluginTypesResponse{PluginTypes: []*imsv1.PluginType{
		{Type: "helm", Builtin: true}, {Type: "s3bucket", Version: "1.2.0"},
	}}), nil
}

// Completion of the resources and flag values item 11 found missing:
// workflow ids, steps, --revision, --role, and the fixed values of
// --state, --mode, --kind, --format, -o and --sort-by; --context from the
// config file; nothing, quickly, without a server.
func TestCompletionOfWorkflowsRevisionsRolesAndValues(t *testing.T) {
	f := &fakeOperator{workflow: &imsv1.Workflow{Id: "wf_2", Steps: []*imsv1.WorkflowStep{
		{Name: "db", State: imsv1.StepState_STEP_STATE_FAILED}, {Name: "api", State: imsv1.StepState_STEP_STATE_SKIPPED}}}}
	serveFake(t, completeFake{f})
	for _, tc := range []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"workflow", "get", ""}, []string{"wf_2\tprovision running on shop-acme", "wf_1\tupdate failed on shop-beta"}, nil},
		{[]string{"workflow", "approve", "wf_1"}, []string{"wf_1"}, []string{"wf_2"}},
		{[]string{"workflow", "retry", "wf_2", ""}, []string{"db\tfailed", "api\tskipped"}, nil},
		{[]string{"install", "provision", "shop-acme", "--revision", ""}, []string{"12\t1.4.0", "11\t1.3.2"}, nil},
		{[]string{"install", "plan", "--app", "shop", "--revision", "1"}, []string{"12", "11"}, nil},
		{[]string{"app", "diff", "shop", ""}, []string{"12\t1.4.0", "11"}, nil},
		{[]string{"breakglass", "request", "shop-acme", "--role", ""}, []string{"admin\tfull access", "readonly\tlook only"}, nil},
		{[]string{"breakglass", "request", "shop-acme", "--role", "r"}, []string{"readonly"}, []string{"admin"}},
		{[]string{"action", "runs", "shop-acme", "--action", ""}, []string{"migrate", "health"}, nil},
		{[]string{"job", "list", "--state", ""}, []string{"queued", "timed_out", "refused"}, nil},
		{[]string{"action", "run", "shop-acme", "--mode", ""}, []string{"maintenance", "break_glass"}, nil},
		{[]string{"install", "plan", "shop-acme", "--kind", ""}, []string{"update", "provision", "deprovision"}, []string{"helm"}},
		{[]string{"build", "package", "dir", "--kind", ""}, []string{"helm", "terraform"}, []string{"update"}},
		{[]string{"install", "stack", "shop-acme", "--format", ""}, []string{"cloudformation", "local"}, nil},
		{[]string{"job", "list", "-o", ""}, []string{"yaml", "jsonpath=", "go-template="}, nil},
		{[]string{"job", "list", "--sort-by", ""}, []string{".createTime", ".state", ".installId"}, nil},
		{[]string{"install", "list", "--sort-by", ""}, []string{".agent.lastSeenTime", ".name"}, nil},
		{[]string{"--context", ""}, []string{"test\thttp://127.0.0.1:"}, nil},
		{[]string{"context", "use", ""}, []string{"test"}, nil},
		{[]string{"release", "get", ""}, []string{"rel_2\tshop 12 running"}, nil},
		{[]string{"release", "approve", ""}, []string{"rel_2"}, nil},
		{[]string{"release", "rollback", ""}, []string{"rel_2"}, nil},
		{[]string{"token", "revoke", ""}, []string{"ci-deploy\toperator"}, nil},
		{[]string{"plugin", "get", ""}, []string{"helm\tbuilt-in", "s3bucket\t1.2.0"}, nil},
		{[]string{"install", "label", ""}, []string{"shop-acme"}, nil},
	} {
		r := mustRun(t, append([]string{"__complete"}, tc.args...)...)
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("complete %q lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(r.stdout, n) {
				t.Errorf("complete %q offers %q:\n%s", tc.args, n, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "\n:4\n") && !strings.Contains(r.stdout, "\n:6\n") && !strings.HasPrefix(r.stdout, ":4\n") {
			t.Errorf("complete %q may fall back to files:\n%s", tc.args, r.stdout)
		}
	}

	// Without a server: nothing offered, no error, exit 0.
	mustRun(t, "context", "add", "gone", "--server", "http://127.0.0.1:1", "--token", testToken, "--use")
	for _, args := range [][]string{{"workflow", "get", ""}, {"install", "provision", "x", "--revision", ""}, {"breakglass", "request", "x", "--role", ""}} {
		r := mustRun(t, append([]string{"__complete"}, args...)...)
		if r.stdout != ":4\n" {
			t.Errorf("complete %q without a server = %q, want only the directive", args, r.stdout)
		}
	}
}
