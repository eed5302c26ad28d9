package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// plantedApp has a sensitive input, set to plantedValue by
// installs/acme.toml, used by a component and by an action.
const plantedValue = "tok-planted-7c1e9a0b"

var plantedApp = map[string]string{
	"app.toml": "name = \"vault\"\n",
	"inputs.toml": `[[input]]
name = "token"
sensitive = true
required = true
`,
	"components/a.toml": `type = "action"
[config]
env = { TOKEN = "{{ .inputs.token }}" }
steps = [{ name = "a", script = "echo token={{ .inputs.token }}" }]
`,
	"actions/use.toml": `description = "Uses the token."
env = { TOKEN = "{{ .inputs.token }}" }
[[step]]
name = "use"
script = "echo $TOKEN"
`,
	"installs/acme.toml": "[inputs]\ntoken = \"" + plantedValue + "\"\n",
}

// base64Forms are the forms a value takes inside base64 text, whatever
// its offset in what was encoded (the middle of each of the three
// alignments), in the standard and the URL alphabets.
func base64Forms(v string) []string {
	var out []string
	for k := range 3 {
		b := append(make([]byte, k), v...)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			s := enc.EncodeToString(b)
			start := 0
			if k > 0 {
				start = 4 // the first group mixes in the padding bytes
			}
			out = append(out, s[start:len(b)/3*4])
		}
	}
	return out
}

// No answer of imsd's operator API carries a sensitive input's value, to
// any role: every RPC of OperatorService, enumerated from its descriptor
// (so an RPC added later is called too), is called by a token of every
// role the API has (enumerated from the Role enum), its request filled by
// field name with the install, app, job, workflow and action run that
// hold the value, and its answer (or error) is searched for the value
// and its base64 forms, in protobuf binary and in JSON. The install
// stack's files are among the answers.
func TestNoOperatorAnswerCarriesASensitiveValue(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	admin := ims.Admin()
	ctx := context.Background()
	var files []*imsv1.AppFile
	for p, c := range plantedApp {
		files = append(files, &imsv1.AppFile{Path: p, Content: []byte(c)})
	}
	pushed, err := admin.PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: files}))
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed.Msg.Installs) != 1 || pushed.Msg.Installs[0].EnrollmentToken == nil {
		t.Fatalf("push created %v", pushed.Msg.Installs)
	}
	ra := cluster.EnrollRaw(t, ims.URL(), pushed.Msg.Installs[0].EnrollmentToken.Token)
	ra.Connect(t, 10)
	wf, err := admin.StartWorkflow(ctx, connect.NewRequest(&imsv1.StartWorkflowRequest{Install: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION}))
	if err != nil {
		t.Fatal(err)
	}
	as := ra.Assignment(t)
	if !strings.Contains(as.String(), plantedValue) {
		t.Fatalf("the planted value did not reach the agent's assignment: %v", as)
	}
	run, err := admin.StartActionRun(ctx, connect.NewRequest(&imsv1.StartActionRunRequest{Install: "acme", Action: "use"}))
	if err != nil {
		t.Fatal(err)
	}

	// A live plan, while the agent is online: its answer carries the
	// plan jobs.
	livePlan, err := admin.PlanInstall(ctx, connect.NewRequest(&imsv1.PlanInstallRequest{Install: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, Live: true, TimeoutSeconds: 1}))
	if err != nil {
		t.Fatal(err)
	}

	type role struct{ name, token string }
	var roles []role
	enum := imsv1.Role_ROLE_UNSPECIFIED.Descriptor().Values()
	for i := range enum.Len() {
		r := imsv1.Role(enum.Get(i).Number())
		if r == imsv1.Role_ROLE_UNSPECIFIED || r == imsv1.Role_ROLE_ADMIN {
			continue
		}
		tok, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: strings.ReplaceAll(strings.ToLower(r.String()), "_", "-"), Role: r}))
		if err != nil {
			t.Fatal(err)
		}
		roles = append(roles, role{r.String(), tok.Msg.Token})
	}
	// The admin last: its writes (cancels) must not hide anything from
	// the other roles' reads.
	roles = append(roles, role{"ROLE_ADMIN", ims.AdminToken})

	// Request fields by name; an id is the job's, the workflow's or the
	// action run's as the method's name says.
	strs := map[string]string{"install": "acme", "app": "vault", "id_or_name": "acme", "job_id": as.JobId,
		"action": "use", "reason": "all-rpc test", "component_type": "action", "operation": "apply", "role": "admin", "type": "action"}
	idFor := func(method string) string {
		switch {
		case strings.Contains(method, "ActionRun"):
			return run.Msg.Run.GetId()
		case strings.Contains(method, "Job"):
			return as.JobId
		}
		return wf.Msg.Workflow.Id
	}
	request := func(md protoreflect.MethodDescriptor) *dynamicpb.Message {
		m := dynamicpb.NewMessage(md.Input())
		fields := md.Input().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if f.Cardinality() == protoreflect.Repeated {
				continue
			}
			switch f.Kind() {
			case protoreflect.StringKind:
				v := strs[string(f.Name())]
				if f.Name() == "id" {
					v = idFor(string(md.Name()))
				}
				if v != "" {
					m.Set(f, protoreflect.ValueOfString(v))
				}
			case protoreflect.EnumKind:
				if vals := f.Enum().Values(); vals.Len() > 1 {
					m.Set(f, protoreflect.ValueOfEnum(vals.Get(1).Number()))
				}
			}
		}
		return m
	}

	forms := append([]string{plantedValue}, base64Forms(plantedValue)...)
	check := func(t *testing.T, what string, m proto.Message, err error) {
		t.Helper()
		var texts []string
		if m != nil {
			bin, _ := proto.Marshal(m)
			texts = append(texts, protojson.Format(m), string(bin))
		}
		if err != nil {
			texts = append(texts, err.Error())
			var ce *connect.Error
			if errors.As(err, &ce) {
				for _, d := range ce.Details() {
					texts = append(texts, string(d.Bytes()))
				}
			}
		}
		for _, text := range texts {
			for _, f := range forms {
				if strings.Contains(text, f) {
					t.Errorf("%s answers the sensitive value (as %q):\n%s", what, f, text)
				}
			}
		}
	}

	check(t, "PlanInstall (live)", livePlan.Msg, nil)
	methods := imsv1.File_byoc_ims_v1_operator_proto.Services().ByName("OperatorService").Methods()
	for _, r := range roles {
		t.Run(r.name, func(t *testing.T) {
			answered := map[string]bool{}
			for i := range methods.Len() {
				md := methods.Get(i)
				name := string(md.Name())
				c := connect.NewClient[dynamicpb.Message, dynamicpb.Message](agent.DefaultHTTPClient(),
					ims.URL()+"/"+string(md.Parent().FullName())+"/"+name,
					connect.WithSchema(md), connect.WithInterceptors(cluster.Bearer(r.token)),
					connect.WithResponseInitializer(func(spec connect.Spec, msg any) error {
						*msg.(*dynamicpb.Message) = *dynamicpb.NewMessage(spec.Schema.(protoreflect.MethodDescriptor).Output())
						return nil
					}))
				req := connect.NewRequest(request(md))
				if md.IsStreamingServer() {
					// A stream that does not end (a watch, a follow) is
					// read for 2 s after its first message; the first may
					// take longer on a loaded machine (-race in CI: 2 s
					// from the call was once too short for WatchInstalls).
					sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					st, err := c.CallServerStream(sctx, req)
					if err != nil {
						check(t, name, nil, err)
						cancel()
						continue
					}
					n := 0
					var cut *time.Timer
					for st.Receive() {
						check(t, name, st.Msg(), nil)
						if n++; n == 1 {
							cut = time.AfterFunc(2*time.Second, cancel)
						}
					}
					if cut != nil {
						cut.Stop()
					}
					if err := st.Err(); err != nil && (n == 0 || sctx.Err() == nil) {
						check(t, name, nil, err)
					} else {
						answered[name] = true
					}
					st.Close()
					cancel()
					continue
				}
				res, err := c.CallUnary(ctx, req)
				if err != nil {
					check(t, name, nil, err)
					continue
				}
				answered[name] = true
				check(t, name, res.Msg, nil)
				if name == "GetInstallStack" {
					// The stack's files are there, installs/*.toml
					// withheld.
					var gs imsv1.GetInstallStackResponse
					bin, _ := proto.Marshal(res.Msg)
					if err := proto.Unmarshal(bin, &gs); err != nil {
						t.Fatal(err)
					}
					var paths []string
					for _, f := range gs.Files {
						paths = append(paths, f.Path)
					}
					if got := strings.Join(paths, " "); got != "actions/use.toml app.toml components/a.toml inputs.toml" {
						t.Errorf("GetInstallStack files: %s", got)
					}
				}
			}
			// The reads that hold the value answered, so the search above
			// looked at them.
			for _, m := range []string{"GetInstallStack", "GetInstall", "GetJob", "ListJobs", "GetWorkflow", "PlanInstall", "GetActionRun", "StreamJobLogs", "WatchInstalls"} {
				if !answered[m] {
					t.Errorf("%s did not answer %s", m, r.name)
				}
			}
		})
	}
}
