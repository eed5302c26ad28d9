package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// secretApp has a sensitive input, set by installs/acme.toml and used in
// an action's environment and script.
var secretApp = map[string]string{
	"app.toml": "name = \"vault\"\n",
	"inputs.toml": `[[input]]
name = "token"
sensitive = true
required = true

[[input]]
name = "region"
default = "eu"
`,
	"components/a.toml": `type = "action"
[config]
env = { TOKEN = "{{ .inputs.token }}", REGION = "{{ .inputs.region }}" }
steps = [{ name = "a", script = "echo token={{ .inputs.token }}" }]
`,
	"installs/acme.toml": "[inputs]\ntoken = \"tok-sensitive-4242\"\n",
}

// A sensitive input's value never leaves imsd in an answer, to an admin
// or a viewer, over Connect (binary and JSON), gRPC or gRPC-Web, through
// any read: installs, the fleet watch, jobs (their config's env, script
// and the reserved sensitive list), workflows, plans and action runs; nor
// through the CLI's text and JSON. Only the agent gets it, in the job's
// assignment.
func TestSensitiveInputsNeverLeaveIMS(t *testing.T) {
	const value, other = "tok-sensitive-4242", "tok-other-9999"
	opts := fast
	opts.WorkflowInterval = 100 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(secretApp)
	if strings.Contains(pushed.Output, value) {
		t.Fatalf("app push printed the sensitive value:\n%s", pushed.Output)
	}
	ra := cluster.EnrollRaw(t, ims.URL(), pushed.EnrollToken(t))
	ra.Connect(t, 10)
	admin := ims.Admin()
	ctx := context.Background()
	wf, err := admin.StartWorkflow(ctx, connect.NewRequest(&imsv1.StartWorkflowRequest{Install: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION}))
	if err != nil {
		t.Fatal(err)
	}
	// The agent gets the value, in the job it runs.
	as := ra.Assignment(t)
	if !strings.Contains(fmt.Sprint(as), value) {
		t.Fatalf("the assignment does not carry the sensitive value: %v", as)
	}
	jobID := as.JobId

	// An operator's own enqueue that lists sensitive values.
	cfg, _ := structpb.NewStruct(map[string]any{"env": map[string]any{"T": "x-" + other}, "sensitive": []any{other}})
	enq, err := admin.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "acme", ComponentType: "action", Operation: "apply", Config: cfg}))
	if err != nil {
		t.Fatal(err)
	}
	noValue(t, "EnqueueJob", enq.Msg, value, other)

	vt, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "support", Role: imsv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []struct{ name, token string }{{"admin", ims.AdminToken}, {"viewer", vt.Msg.Token}} {
		for wire, o := range map[string][]connect.ClientOption{
			"connect-proto": nil,
			"connect-json":  {connect.WithProtoJSON()},
			"grpc":          {connect.WithGRPC()},
			"grpc-web":      {connect.WithGRPCWeb()},
		} {
			t.Run(role.name+"/"+wire, func(t *testing.T) {
				o = append(o, connect.WithInterceptors(cluster.Bearer(role.token)))
				c := imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL(), o...)
				call := func(what string, m proto.Message, err error) proto.Message {
					t.Helper()
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					noValue(t, what, m, value, other)
					return m
				}
				gi, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
				in := call("GetInstall", gi.Msg, err).(*imsv1.GetInstallResponse).Install
				if in.Inputs["token"] != "(sensitive)" || in.Inputs["region"] == "(sensitive)" {
					t.Errorf("GetInstall inputs = %v, want token masked and region shown", in.Inputs)
				}
				li, err := c.ListInstalls(ctx, connect.NewRequest(&imsv1.ListInstallsRequest{}))
				call("ListInstalls", li.Msg, err)
				w, err := c.WatchInstalls(ctx, connect.NewRequest(&imsv1.WatchInstallsRequest{}))
				if err != nil {
					t.Fatal(err)
				}
				if !w.Receive() {
					t.Fatalf("WatchInstalls: %v", w.Err())
				}
				call("WatchInstalls", w.Msg(), nil)
				w.Close()
				lj, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{}))
				call("ListJobs", lj.Msg, err)
				if len(lj.Msg.Jobs) != 2 {
					t.Fatalf("%d jobs, want 2", len(lj.Msg.Jobs))
				}
				for _, id := range []string{jobID, enq.Msg.Job.Id} {
					gj, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
					j := call("GetJob", gj.Msg, err).(*imsv1.GetJobResponse).Job
					if !strings.Contains(protojson.Format(j.Config), "(sensitive)") {
						t.Errorf("GetJob %s: config %v shows no masked value", id, j.Config)
					}
				}
				gw, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: wf.Msg.Workflow.Id}))
				call("GetWorkflow", gw.Msg, err)
				lw, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{}))
				call("ListWorkflows", lw.Msg, err)
				pl, err := c.PlanInstall(ctx, connect.NewRequest(&imsv1.PlanInstallRequest{Install: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION}))
				call("PlanInstall", pl.Msg, err)
				ar, err := c.ListActionRuns(ctx, connect.NewRequest(&imsv1.ListActionRunsRequest{Install: "acme"}))
				call("ListActionRuns", ar.Msg, err)
			})
		}
	}

	// Admin writes answer with the install too.
	up, err := admin.UpdateInstall(ctx, connect.NewRequest(&imsv1.UpdateInstallRequest{Install: "acme", SetInputs: map[string]string{"token": other}}))
	if err != nil {
		t.Fatal(err)
	}
	noValue(t, "UpdateInstall", up.Msg, value, other)
	ci, err := admin.CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: "vault", Name: "beta", Inputs: map[string]string{"token": other}}))
	if err != nil {
		t.Fatal(err)
	}
	noValue(t, "CreateInstall", ci.Msg, value, other)

	// The CLI, in text and JSON.
	for _, args := range [][]string{
		{"install", "get", "acme"}, {"install", "get", "acme", "-o", "json"},
		{"install", "list"}, {"install", "list", "-o", "json"},
		{"job", "get", jobID}, {"job", "get", jobID, "-o", "json"},
		{"job", "list", "-o", "json"},
	} {
		out := cli.Run(0, args...)
		if strings.Contains(out, value) || strings.Contains(out, other) {
			t.Errorf("byoc %s shows a sensitive value:\n%s", strings.Join(args, " "), out)
		}
	}
}

// noValue fails t if m, in any encoding a client sees, carries one of
// values.
func noValue(t *testing.T, what string, m proto.Message, values ...string) {
	t.Helper()
	js := protojson.Format(m)
	bin, _ := proto.Marshal(m)
	for _, v := range values {
		if strings.Contains(js, v) || strings.Contains(string(bin), v) {
			t.Errorf("%s answers a sensitive value %q:\n%s", what, v, js)
		}
	}
}
