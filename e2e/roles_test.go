package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// rolesApp has two installs (acme and globex), a break-glass role, an
// ordinary action (use) and a debug action (mode break_glass).
var rolesApp = map[string]string{
	"app.toml": "name = \"shop\"\n",
	"break_glass.toml": `max_duration = "2h"
[[role]]
name = "debugger"
description = "Read logs."
`,
	"components/a.toml": `type = "action"
[config]
steps = [{ name = "a", script = "echo a" }]
`,
	"actions/use.toml":     "description = \"Uses.\"\n[[step]]\nname = \"use\"\nscript = \"echo use\"\n",
	"actions/debug.toml":   "description = \"Debugs.\"\nmode = \"break_glass\"\n[[step]]\nname = \"debug\"\nscript = \"echo debug\"\n",
	"debug/peek.toml":      "description = \"Peeks.\"\nscript = \"echo peek\"\n",
	"installs/acme.toml":   "[labels]\ncustomer = \"acme\"\nenv = \"prod\"\n",
	"installs/globex.toml": "[labels]\ncustomer = \"globex\"\nenv = \"prod\"\n",
}

// rpcAccess is what each RPC of OperatorService needs, written out here
// apart from imsd's own rules: PERMISSION@TARGET, where the target is
// all (a grant on everything), any (a grant anywhere; lists are
// filtered), app (the app; to read, one of its installs is enough) or
// install (the install the request names, directly or through a job or
// workflow id); self needs credentials only, public not even those. An
// RPC missing here fails TestEveryRPCEveryRole.
var rpcAccess = map[string]string{
	"WhoAmI": "self", "CheckAccess": "self", "GetLoginConfig": "public",
	"CreateApiToken": "manage@all", "ListApiTokens": "manage@all", "RevokeApiToken": "manage@all",
	"CreateApp": "deploy@all", "ListApps": "read@any", "GetApp": "read@app", "PushAppRevision": "deploy@any",
	"ListAppRevisions": "read@app", "DiffAppRevisions": "read@app",
	"CreateInstall": "deploy@app", "ListInstalls": "read@any", "GetInstall": "read@install", "ListInstallDrift": "read@install",
	"WatchInstalls": "read@any", "CreateEnrollmentToken": "deploy@install", "UpdateInstall": "deploy@install", "LabelInstall": "manage@install", "RevokeAgent": "manage@install", "OfferAgentUpdate": "deploy@install", "CheckInstallDrift": "deploy@install", "CreateBundle": "deploy@install", "SignBundle": "deploy@install", "ImportBundleResults": "deploy@install", "UploadBundleResults": "deploy@install", "ImportComponent": "deploy@install", "PlanInstall": "read@install",
	"StartWorkflow": "deploy@install", "ListWorkflows": "read@install", "GetWorkflow": "read@install", "ApproveWorkflow": "deploy@install",
	"CancelWorkflow": "deploy@install", "RetryWorkflowStep": "deploy@install",
	"EnqueueJob": "deploy@install", "EnqueueJobs": "deploy@install", "ListJobs": "read@install", "GetJob": "read@install",
	"StreamJobLogs": "read@install", "CancelJob": "deploy@install",
	"RegisterPluginType": "manage@all", "ListPluginTypes": "read@any", "GetPluginType": "read@any", "RemovePluginType": "manage@all",
	// The request runs action "use" (mode maintenance): deploy; a debug
	// action is checked apart below.
	"ListActions": "read@install", "StartActionRun": "deploy@install", "ListActionRuns": "read@install", "GetActionRun": "read@install",
	// Debug commands only read: support runs them as operators do.
	"ListDebugCommands": "read@install", "RunDebugCommand": "debug@install",
	"GetTelemetry": "read@install",
	// A support shell needs break-glass (support, admin) on the install,
	// and on the agent's side a live grant that allows sessions.
	"SupportShell": "break-glass@install", "ListSupportRecordings": "break-glass@install", "GetSupportRecording": "break-glass@install",
	"RequestBreakGlass": "break-glass@install", "ListBreakGlassGrants": "read@install", "GetBreakGlassPolicy": "read@install",
	"ListAuditEvents": "read@install", "GetInstallStack": "read@install",
	"CreateBuildAgentToken": "manage@all", "StartBuild": "manage@all", "ListBuilds": "read@any", "ListInstallImages": "read@install", "ListInstallArtifacts": "read@install",
	// A release spans the fleet and names its installs: a grant on
	// everything.
	"CreateRelease": "deploy@all", "ListReleases": "read@all", "GetRelease": "read@all", "ApproveRelease": "deploy@all",
	"PauseRelease": "deploy@all", "ResumeRelease": "deploy@all", "CancelRelease": "deploy@all", "RetryRelease": "deploy@all",
	"RollbackRelease": "deploy@all",
}

// rolePerms is the role table of docs/operator/operators-and-roles.md.
var rolePerms = map[imsv1.Role][]string{
	imsv1.Role_ROLE_VIEWER:   {"read"},
	imsv1.Role_ROLE_OPERATOR: {"read", "deploy", "debug"},
	imsv1.Role_ROLE_SUPPORT:  {"read", "debug", "break-glass"},
	imsv1.Role_ROLE_ADMIN:    {"read", "deploy", "debug", "break-glass", "manage"},
}

type roleFixture struct {
	ims   *cluster.IMS
	admin imsv1connect.OperatorServiceClient
	// per install: a job, a workflow, an action run and a kept support
	// session recording
	job, wf, run, rec map[string]string
}

func startRolesFixture(t *testing.T) *roleFixture {
	t.Helper()
	ims := cluster.StartIMS(t, fast)
	admin := ims.Admin()
	ctx := context.Background()
	var files []*imsv1.AppFile
	for p, c := range rolesApp {
		files = append(files, &imsv1.AppFile{Path: p, Content: []byte(c)})
	}
	if _, err := admin.PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: files})); err != nil {
		t.Fatal(err)
	}
	f := &roleFixture{ims: ims, admin: admin, job: map[string]string{}, wf: map[string]string{}, run: map[string]string{}, rec: map[string]string{}}
	for _, in := range []string{"acme", "globex"} {
		wf, err := admin.StartWorkflow(ctx, connect.NewRequest(&imsv1.StartWorkflowRequest{Install: in, Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION}))
		if err != nil {
			t.Fatal(err)
		}
		f.wf[in] = wf.Msg.Workflow.Id
		j, err := admin.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: in, ComponentType: "action", Operation: "plan"}))
		if err != nil {
			t.Fatal(err)
		}
		f.job[in] = j.Msg.Job.Id
		run, err := admin.StartActionRun(ctx, connect.NewRequest(&imsv1.StartActionRunRequest{Install: in, Action: "use"}))
		if err != nil {
			t.Fatal(err)
		}
		f.run[in] = run.Msg.Run.Id
		f.rec[in] = "ses_" + in
		keepRecording(t, ims, in, f.rec[in], false)
	}
	return f
}

// token creates a token of role on scope ("" or install:NAME) and
// returns its client.
func (f *roleFixture) token(t *testing.T, name string, role imsv1.Role, install, selector string) imsv1connect.OperatorServiceClient {
	t.Helper()
	tok, err := f.admin.CreateApiToken(context.Background(), connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: name, Role: role, Install: install, Selector: selector}))
	if err != nil {
		t.Fatal(err)
	}
	return f.ims.Client(tok.Msg.Token)
}

// request fills md's request for target install in by field name.
func (f *roleFixture) request(md protoreflect.MethodDescriptor, in string) proto.Message {
	name := string(md.Name())
	if name == "EnqueueJobs" {
		return &imsv1.EnqueueJobsRequest{Jobs: []*imsv1.EnqueueJobRequest{{Install: in, ComponentType: "action", Operation: "plan"}}}
	}
	strs := map[string]string{"install": in, "app": "shop", "id_or_name": in, "job_id": f.job[in], "action": "use",
		"reason": "roles test", "component_type": "action", "operation": "plan", "type": "action", "role": "debugger", "verb": "deploy",
		"command": "peek"}
	switch name {
	case "GetApp":
		strs["id_or_name"] = "shop"
	case "RevokeApiToken":
		strs["id_or_name"] = "no-such-token"
	}
	m := dynamicpb.NewMessage(md.Input())
	fields := md.Input().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Cardinality() == protoreflect.Repeated {
			continue
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			v := strs[string(fd.Name())]
			if fd.Name() == "id" {
				switch {
				case strings.Contains(name, "ActionRun"):
					v = f.run[in]
				case strings.Contains(name, "SupportRecording"):
					v = f.rec[in]
				case strings.Contains(name, "Job"):
					v = f.job[in]
				default:
					v = f.wf[in]
				}
			}
			if v != "" {
				m.Set(fd, protoreflect.ValueOfString(v))
			}
		case protoreflect.EnumKind:
			if vals := fd.Enum().Values(); vals.Len() > 1 {
				m.Set(fd, protoreflect.ValueOfEnum(vals.Get(1).Number()))
			}
		}
	}
	return m
}

// call calls md with req as client token and returns the error, if any,
// the call (or its stream's first message) ended with.
func (f *roleFixture) call(ctx context.Context, token string, md protoreflect.MethodDescriptor, req proto.Message) error {
	c := connect.NewClient[dynamicpb.Message, dynamicpb.Message](agent.DefaultHTTPClient(),
		f.ims.URL()+"/"+string(md.Parent().FullName())+"/"+string(md.Name()),
		connect.WithSchema(md), connect.WithInterceptors(cluster.Bearer(token)),
		connect.WithResponseInitializer(func(spec connect.Spec, msg any) error {
			*msg.(*dynamicpb.Message) = *dynamicpb.NewMessage(spec.Schema.(protoreflect.MethodDescriptor).Output())
			return nil
		}))
	dm := dynamicpb.NewMessage(md.Input())
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, dm); err != nil {
		return err
	}
	if md.IsStreamingClient() && !md.IsStreamingServer() {
		// A client stream (UploadBundleResults): its first message is
		// checked.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st := c.CallClientStream(sctx)
		if err := st.Send(dm); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err := st.CloseAndReceive()
		return err
	}
	if md.IsStreamingClient() {
		// A bidi stream (SupportShell): its first message is checked.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st := c.CallBidiStream(sctx)
		if err := st.Send(dm); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		st.CloseRequest()
		defer st.CloseResponse()
		if _, err := st.Receive(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(sctx.Err(), context.DeadlineExceeded) {
			return err
		}
		return nil
	}
	if md.IsStreamingServer() {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := c.CallServerStream(sctx, connect.NewRequest(dm))
		if err != nil {
			return err
		}
		defer st.Close()
		if st.Receive() {
			return nil
		}
		if err := st.Err(); err != nil && !errors.Is(sctx.Err(), context.DeadlineExceeded) {
			return err
		}
		return nil
	}
	_, err = c.CallUnary(ctx, connect.NewRequest(dm))
	return err
}

// Every RPC of OperatorService, enumerated from its descriptor (so an RPC
// added later is called too, and fails here until rpcAccess says what it
// needs), is called by a token of every role (enumerated from the Role
// enum), granted on everything, on install acme only and on the installs
// labelled customer=acme (acme), against install
// acme and install globex. A call the role table does not allow is
// refused with permission_denied naming the role and the install; one it
// allows is not refused.
func TestEveryRPCEveryRole(t *testing.T) {
	f := startRolesFixture(t)
	ctx := context.Background()
	methods := imsv1.File_byoc_ims_v1_operator_proto.Services().ByName("OperatorService").Methods()
	for i := range methods.Len() {
		if _, ok := rpcAccess[string(methods.Get(i).Name())]; !ok {
			t.Errorf("%s: not in rpcAccess; say what it needs", methods.Get(i).Name())
		}
	}
	enum := imsv1.Role_ROLE_UNSPECIFIED.Descriptor().Values()
	var roles []imsv1.Role
	for i := range enum.Len() {
		if r := imsv1.Role(enum.Get(i).Number()); r != imsv1.Role_ROLE_UNSPECIFIED {
			roles = append(roles, r)
		}
	}
	// Admins last: their writes must not hide anything from the others.
	slices.SortStableFunc(roles, func(a, b imsv1.Role) int {
		if a == imsv1.Role_ROLE_ADMIN {
			return 1
		}
		if b == imsv1.Role_ROLE_ADMIN {
			return -1
		}
		return 0
	})
	for _, scope := range []string{"install", "selector", "all"} {
		for _, role := range roles {
			rname := strings.ToLower(strings.TrimPrefix(role.String(), "ROLE_"))
			tname := rname + "-" + scope
			req := &imsv1.CreateApiTokenRequest{Name: tname, Role: role}
			switch scope {
			case "install":
				req.Install = "acme"
			case "selector":
				req.Selector = "customer=acme"
			}
			scoped := scope != "all"
			tok, err := f.admin.CreateApiToken(ctx, connect.NewRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			t.Run(tname, func(t *testing.T) {
				for i := range methods.Len() {
					md := methods.Get(i)
					spec := rpcAccess[string(md.Name())]
					for _, target := range []string{"acme", "globex"} {
						want := allowedBy(spec, role, scoped, target)
						err := f.call(ctx, tok.Msg.Token, md, f.request(md, target))
						code := connect.CodeOf(err)
						switch {
						case !want && code != connect.CodePermissionDenied:
							t.Errorf("%s on %s: got %v, want permission_denied", md.Name(), target, err)
						case !want && !strings.Contains(err.Error(), rname):
							t.Errorf("%s on %s: refusal does not name role %s: %v", md.Name(), target, rname, err)
						case !want && strings.HasSuffix(spec, "@install") && !strings.Contains(err.Error(), "install "+target):
							t.Errorf("%s on %s: refusal does not name the install: %v", md.Name(), target, err)
						case want && err != nil && (code == connect.CodePermissionDenied || code == connect.CodeUnauthenticated):
							t.Errorf("%s on %s: refused (%v), though %s allows it", md.Name(), target, err, spec)
						}
					}
				}
			})
		}
	}
}

// allowedBy reports whether a role, granted on everything or (scoped) on
// install acme only, may call an RPC that needs spec on install target.
func allowedBy(spec string, role imsv1.Role, scoped bool, target string) bool {
	if spec == "self" || spec == "public" {
		return true
	}
	perm, on, _ := strings.Cut(spec, "@")
	if !slices.Contains(rolePerms[role], perm) {
		return false
	}
	switch on {
	case "all":
		return !scoped
	case "any":
		return true
	case "app":
		return !scoped || perm == "read"
	case "install":
		return !scoped || target == "acme"
	}
	panic("bad spec " + spec)
}

// A support engineer scoped to one customer (a label selector grant,
// customer=acme) sees only that customer's
// installs in lists, the fleet view and the audit, may request
// break-glass and run a debug action there, and may not run an ordinary
// action (deploy). Every mutating RPC on another install is refused in
// TestEveryRPCEveryRole (support-install, support-selector).
func TestSupportScopedToOneCustomer(t *testing.T) {
	f := startRolesFixture(t)
	ctx := context.Background()
	sup := f.token(t, "sup-acme", imsv1.Role_ROLE_SUPPORT, "", "customer=acme")

	ins, err := sup.ListInstalls(ctx, connect.NewRequest(&imsv1.ListInstallsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ins.Msg.Installs) != 1 || ins.Msg.Installs[0].Name != "acme" {
		t.Fatalf("ListInstalls: %v, want acme only", ins.Msg.Installs)
	}
	wctx, cancel := context.WithCancel(ctx)
	st, err := sup.WatchInstalls(wctx, connect.NewRequest(&imsv1.WatchInstallsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() {
		t.Fatal(st.Err())
	}
	if fl := st.Msg().Installs; !st.Msg().Snapshot || len(fl) != 1 || fl[0].Install.Name != "acme" {
		t.Fatalf("fleet view: %v, want acme only", fl)
	}
	cancel()
	st.Close()
	apps, err := sup.ListApps(ctx, connect.NewRequest(&imsv1.ListAppsRequest{}))
	if err != nil || len(apps.Msg.Apps) != 1 {
		t.Fatalf("ListApps: %v %v", apps, err)
	}
	jobs, err := sup.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	acme, err := f.admin.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Msg.Jobs {
		if j.InstallId != acme.Msg.Install.Id {
			t.Errorf("ListJobs shows job %s of install %s", j.Id, j.InstallId)
		}
	}
	wfs, err := sup.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{}))
	if err != nil || len(wfs.Msg.Workflows) == 0 {
		t.Fatalf("ListWorkflows: %v %v", wfs, err)
	}
	for _, w := range wfs.Msg.Workflows {
		if w.InstallId != acme.Msg.Install.Id {
			t.Errorf("ListWorkflows shows %s of %s", w.Id, w.InstallId)
		}
	}

	// Break-glass on acme: requested; the debug action runs; an ordinary
	// action does not.
	bg, err := sup.RequestBreakGlass(ctx, connect.NewRequest(&imsv1.RequestBreakGlassRequest{Install: "acme", Role: "debugger", Reason: "customer ticket 42", DurationSeconds: 3600}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.StartActionRun(ctx, connect.NewRequest(&imsv1.StartActionRunRequest{Install: "acme", Action: "debug"})); err != nil {
		t.Fatalf("support runs the debug action: %v", err)
	}
	_, err = sup.StartActionRun(ctx, connect.NewRequest(&imsv1.StartActionRunRequest{Install: "acme", Action: "use"}))
	wantCode(t, err, connect.CodePermissionDenied, "support")
	_, err = sup.RequestBreakGlass(ctx, connect.NewRequest(&imsv1.RequestBreakGlassRequest{Install: "globex", Role: "debugger", Reason: "x", DurationSeconds: 60}))
	wantCode(t, err, connect.CodePermissionDenied, "install globex")
	grants, err := sup.ListBreakGlassGrants(ctx, connect.NewRequest(&imsv1.ListBreakGlassGrantsRequest{}))
	if err != nil || len(grants.Msg.Grants) != 1 || grants.Msg.Grants[0].Id != bg.Msg.Grant.Id {
		t.Fatalf("ListBreakGlassGrants: %v %v", grants, err)
	}

	// The audit: acme's chain only, with the break-glass request in it;
	// not the vendor chain, not globex's.
	evs, err := sup.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	sawRequest := false
	for _, e := range evs.Msg.Events {
		if e.Chain != acme.Msg.Install.Id {
			t.Errorf("audit shows chain %s: %s %s", e.Chain, e.Kind, e.Subject)
		}
		sawRequest = sawRequest || (e.Actor == "token:sup-acme" && e.Subject == "RequestBreakGlass")
	}
	if !sawRequest {
		t.Errorf("acme's audit lacks the support engineer's break-glass request: %v", evs.Msg.Events)
	}
	_, err = sup.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Vendor: true}))
	wantCode(t, err, connect.CodePermissionDenied, "support")

	who, err := sup.WhoAmI(ctx, connect.NewRequest(&imsv1.WhoAmIRequest{}))
	if err != nil || len(who.Msg.Grants) != 1 || who.Msg.Grants[0].Scope != "selector:customer=acme" || who.Msg.Grants[0].Source != "token sup-acme" {
		t.Fatalf("WhoAmI: %v %v", who, err)
	}
	can, err := sup.CheckAccess(ctx, connect.NewRequest(&imsv1.CheckAccessRequest{Verb: "provision", Install: "acme"}))
	if err != nil || can.Msg.Allowed || !strings.Contains(can.Msg.Reason, "operator or admin") {
		t.Fatalf("can-i provision acme: %v %v", can, err)
	}
	can, err = sup.CheckAccess(ctx, connect.NewRequest(&imsv1.CheckAccessRequest{Verb: "break-glass", Install: "acme"}))
	if err != nil || !can.Msg.Allowed {
		t.Fatalf("can-i break-glass acme: %v %v", can, err)
	}
}

// /metrics carries a series per install: byoc_install_info with its app
// and labels (label_KEY), and its jobs and agent by install name, so
// alerts and dashboards can route and group by install label.
func TestMetricsCarryInstallLabels(t *testing.T) {
	f := startRolesFixture(t)
	res, err := http.Get(f.ims.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := string(b)
	for _, want := range []string{
		`byoc_install_info{app="shop",install="acme",label_customer="acme",label_env="prod"} 1`,
		`byoc_install_info{app="shop",install="globex",label_customer="globex",label_env="prod"} 1`,
		`byoc_install_jobs{install="acme",state="queued"}`,
		`byoc_install_agent_online{install="globex"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A call refused for want of a role leaves an operator.refused audit
// event naming the actor, the procedure, the install it targeted and why,
// in that install's chain, and byoc audit list shows it; a refusal the
// handler makes (a support engineer running an ordinary action) is
// recorded too. A client retrying a refused call in a loop leaves a
// bounded number of records (TestRefusalRecordsAreRateLimited covers the
// bound's arithmetic).
func TestRefusedCallsAreAudited(t *testing.T) {
	f := startRolesFixture(t)
	ctx := context.Background()
	viewer := f.token(t, "viewer-acme", imsv1.Role_ROLE_VIEWER, "acme", "")
	_, err := viewer.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "globex", ComponentType: "action", Operation: "plan"}))
	wantCode(t, err, connect.CodePermissionDenied, "install globex")
	sup := f.token(t, "sup-acme", imsv1.Role_ROLE_SUPPORT, "", "customer=acme")
	_, err = sup.StartActionRun(ctx, connect.NewRequest(&imsv1.StartActionRunRequest{Install: "acme", Action: "use"}))
	wantCode(t, err, connect.CodePermissionDenied, "support")

	refused := func(install string) []*imsv1.AuditEvent {
		t.Helper()
		evs, err := f.admin.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: install}))
		if err != nil {
			t.Fatal(err)
		}
		var out []*imsv1.AuditEvent
		for _, e := range evs.Msg.Events {
			if e.Kind == "operator.refused" {
				out = append(out, e)
			}
		}
		return out
	}
	evs := refused("globex")
	if len(evs) != 1 || evs[0].Actor != "token:viewer-acme" || evs[0].Subject != "EnqueueJob" ||
		!strings.Contains(evs[0].Data, `"install":"globex"`) || !strings.Contains(evs[0].Data, "may not enqueue jobs on install globex") ||
		!strings.Contains(evs[0].Data, "viewer on install acme") {
		t.Fatalf("globex's refusals: %v", evs)
	}
	evs = refused("acme")
	if len(evs) != 1 || evs[0].Actor != "token:sup-acme" || evs[0].Subject != "StartActionRun" || !strings.Contains(evs[0].Data, `"install":"acme"`) {
		t.Fatalf("acme's refusals: %v", evs)
	}

	cli := cluster.NewCLI(t, f.ims)
	out := cli.Run(0, "audit", "list", "--install", "globex")
	if !strings.Contains(out, "operator.refused") || !strings.Contains(out, "token:viewer-acme") || !strings.Contains(out, "EnqueueJob") {
		t.Errorf("byoc audit list --install globex:\n%s", out)
	}

	// A flood of refusals: the burst is recorded, the rest counted.
	for range 3 * 10 {
		_, err := viewer.CancelJob(ctx, connect.NewRequest(&imsv1.CancelJobRequest{Id: f.job["globex"]}))
		wantCode(t, err, connect.CodePermissionDenied, "install globex")
	}
	if n := len(refused("globex")); n > 10 {
		t.Errorf("%d refusal records after a flood of 30 refusals; want at most the burst, 10", n)
	}
}

// A caller scoped to a few installs among many gets full pages: the
// store query reads only its installs' jobs, workflows and audit chains,
// so a page of N holds N (not the few of N that were theirs) and every
// job and record of theirs comes back exactly once across the pages.
func TestScopedCallerGetsFullPages(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	admin := ims.Admin()
	ctx := context.Background()
	files := []*imsv1.AppFile{
		{Path: "app.toml", Content: []byte("name = \"shop\"\n")},
		{Path: "components/a.toml", Content: []byte("type = \"action\"\n[config]\nsteps = [{ name = \"a\", script = \"true\" }]\n")},
	}
	mine := map[string]bool{"i03": true, "i07": true, "i10": true}
	var names []string
	for i := range 12 {
		name := fmt.Sprintf("i%02d", i)
		names = append(names, name)
		customer := "other"
		if mine[name] {
			customer = "acme"
		}
		files = append(files, &imsv1.AppFile{Path: "installs/" + name + ".toml", Content: []byte("[labels]\ncustomer = \"" + customer + "\"\n")})
	}
	if _, err := admin.PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: files})); err != nil {
		t.Fatal(err)
	}
	myJobs, myChains := map[string]bool{}, map[string]bool{}
	for _, name := range names {
		if _, err := admin.StartWorkflow(ctx, connect.NewRequest(&imsv1.StartWorkflowRequest{Install: name, Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION})); err != nil {
			t.Fatal(err)
		}
		// The workflow's engine adds jobs of its own as it goes: the test
		// knows these two, and checks the others by their install.
		for range 2 {
			j, err := admin.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: name, ComponentType: "action", Operation: "plan"}))
			if err != nil {
				t.Fatal(err)
			}
			if mine[name] {
				myJobs[j.Msg.Job.Id] = true
				myChains[j.Msg.Job.InstallId] = true
			}
		}
	}
	tok, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "acme-viewer", Role: imsv1.Role_ROLE_VIEWER, Selector: "customer=acme"}))
	if err != nil {
		t.Fatal(err)
	}
	c := ims.Client(tok.Msg.Token)

	// Jobs, 2 a page: full pages of the jobs of acme's installs.
	seen := map[string]bool{}
	token := ""
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("more than 100 pages")
		}
		res, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{PageSize: 2, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		token = res.Msg.NextPageToken
		if token != "" && len(res.Msg.Jobs) != 2 {
			t.Errorf("jobs page %d: %d jobs and a next page; want 2", page, len(res.Msg.Jobs))
		}
		for _, j := range res.Msg.Jobs {
			if !myChains[j.InstallId] || seen[j.Id] {
				t.Errorf("jobs page %d: job %s of %s (acme's: %v, seen before: %v)", page, j.Id, j.InstallId, myChains[j.InstallId], seen[j.Id])
			}
			seen[j.Id] = true
		}
		if token == "" {
			break
		}
	}
	for id := range myJobs {
		if !seen[id] {
			t.Errorf("no page held acme's job %s", id)
		}
	}

	// Workflows, 2 a page: 2 of acme's.
	wfs, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{PageSize: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if len(wfs.Msg.Workflows) != 2 {
		t.Errorf("ListWorkflows page_size 2: %d workflows, want 2", len(wfs.Msg.Workflows))
	}

	// Audit, 5 a page: full pages of acme's installs' chains, each
	// record once, all of them.
	want := 0
	for id := range myChains {
		evs, err := admin.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: id}))
		if err != nil {
			t.Fatal(err)
		}
		want += len(evs.Msg.Events)
	}
	records := map[string]bool{}
	token = ""
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("more than 100 audit pages")
		}
		res, err := c.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Limit: 5, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		token = res.Msg.NextPageToken
		if token != "" && len(res.Msg.Events) != 5 {
			t.Errorf("audit page %d: %d events and a next page; want 5", page, len(res.Msg.Events))
		}
		for _, e := range res.Msg.Events {
			key := fmt.Sprintf("%s/%d", e.Chain, e.Seq)
			if !myChains[e.Chain] || records[key] {
				t.Errorf("audit page %d: record %s (acme's: %v, seen before: %v)", page, key, myChains[e.Chain], records[key])
			}
			records[key] = true
		}
		if token == "" {
			break
		}
	}
	if len(records) < want { // the engine may have added more since
		t.Errorf("audit pages held %d of acme's %d records", len(records), want)
	}
}

// Labels decide what selector grants cover, so changing an install's
// labels needs manage on it, by byoc install label and by a push of its
// installs/NAME.toml alike: an operator on the app may push, but not a
// revision that relabels one of its installs (a person who is operator
// on the app and admin on env=sandbox must not bring a prod install under
// the admin grant). The refused push changes nothing: no revision, no
// label. An admin on the app may.
func TestPushRelabelNeedsManage(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	admin := ims.Admin()
	ctx := context.Background()
	push := func(c imsv1connect.OperatorServiceClient, acmeFile string) error {
		var files []*imsv1.AppFile
		for p, body := range withFile(rolesApp, "installs/acme.toml", acmeFile) {
			files = append(files, &imsv1.AppFile{Path: p, Content: []byte(body)})
		}
		_, err := c.PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: files}))
		return err
	}
	revisions := func() int {
		r, err := admin.ListAppRevisions(ctx, connect.NewRequest(&imsv1.ListAppRevisionsRequest{App: "shop"}))
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Msg.Revisions)
	}
	labels := func() map[string]string {
		in, err := admin.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		return in.Msg.Install.Labels
	}
	if err := push(admin, rolesApp["installs/acme.toml"]); err != nil {
		t.Fatal(err)
	}
	token := func(name string, role imsv1.Role) imsv1connect.OperatorServiceClient {
		tok, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: name, Role: role, App: "shop"}))
		if err != nil {
			t.Fatal(err)
		}
		return ims.Client(tok.Msg.Token)
	}
	deployer, appAdmin := token("shop-deployer", imsv1.Role_ROLE_OPERATOR), token("shop-admin", imsv1.Role_ROLE_ADMIN)

	// Settings and the rest: an operator on the app pushes them.
	if err := push(deployer, "parallelism = 2\n"+rolesApp["installs/acme.toml"]); err != nil {
		t.Fatalf("operator on the app pushes a setting: %v", err)
	}
	n := revisions()
	for _, file := range []string{
		"[labels]\ncustomer = \"acme\"\nenv = \"sandbox\"\n",               // a value changed
		"[labels]\ncustomer = \"acme\"\n",                                  // a label the file named, removed
		"[labels]\ncustomer = \"acme\"\nenv = \"prod\"\ntier = \"gold\"\n", // one added
	} {
		err := push(deployer, file)
		wantCode(t, err, connect.CodePermissionDenied, "install acme")
		if err != nil && !strings.Contains(err.Error(), "manage") {
			t.Errorf("refusal does not name the manage permission: %v", err)
		}
		if got := labels(); got["env"] != "prod" || got["tier"] != "" || len(got) != 2 {
			t.Fatalf("a refused push changed acme's labels: %v", got)
		}
		if revisions() != n {
			t.Fatalf("a refused push stored a revision")
		}
	}
	if err := push(appAdmin, "[labels]\ncustomer = \"acme\"\nenv = \"sandbox\"\n"); err != nil {
		t.Fatalf("admin on the app relabels by push: %v", err)
	}
	if got := labels(); got["env"] != "sandbox" {
		t.Fatalf("acme's labels after the admin's push: %v", got)
	}
}

// A scoped caller cannot learn which apps exist from the app filter of
// the install lists: an app it may not read and one that does not exist
// are refused alike, as GetApp refuses them; an app it may read (through
// one of its installs) is listed as before.
func TestAppFilterHidesAppsNotSeen(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	admin := ims.Admin()
	ctx := context.Background()
	var files []*imsv1.AppFile
	for p, c := range rolesApp {
		files = append(files, &imsv1.AppFile{Path: p, Content: []byte(c)})
	}
	if _, err := admin.PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: files})); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateApp(ctx, connect.NewRequest(&imsv1.CreateAppRequest{Name: "secret"})); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "acme-viewer", Role: imsv1.Role_ROLE_VIEWER, Selector: "customer=acme"}))
	if err != nil {
		t.Fatal(err)
	}
	viewer := ims.Client(tok.Msg.Token)
	list := func(app string) (string, error) {
		r, err := viewer.ListInstalls(ctx, connect.NewRequest(&imsv1.ListInstallsRequest{App: app}))
		if err != nil {
			return "", err
		}
		var names []string
		for _, in := range r.Msg.Installs {
			names = append(names, in.Name)
		}
		return strings.Join(names, ","), nil
	}
	watch := func(app string) error {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := viewer.WatchInstalls(wctx, connect.NewRequest(&imsv1.WatchInstallsRequest{App: app}))
		if err != nil {
			return err
		}
		defer st.Close()
		if !st.Receive() {
			return st.Err()
		}
		return nil
	}
	if got, err := list("shop"); err != nil || got != "acme" {
		t.Fatalf("list installs of shop: %q %v, want acme", got, err)
	}
	if err := watch("shop"); err != nil {
		t.Fatalf("watch installs of shop: %v", err)
	}
	for _, call := range []struct {
		name string
		f    func(string) error
	}{
		{"ListInstalls", func(app string) error { _, err := list(app); return err }},
		{"WatchInstalls", watch},
	} {
		secret, none := call.f("secret"), call.f("nonesuch")
		wantCode(t, secret, connect.CodePermissionDenied, "app secret")
		wantCode(t, none, connect.CodePermissionDenied, "app nonesuch")
		if strings.ReplaceAll(secret.Error(), "secret", "X") != strings.ReplaceAll(none.Error(), "nonesuch", "X") {
			t.Errorf("%s: an app that exists and one that does not are refused differently:\n%v\n%v", call.name, secret, none)
		}
	}
}
