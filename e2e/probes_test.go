package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Probes of issue 24, each as a test: what an attacker or a careless
// reader would try.

// leakApp has a secret (from the agent's --secrets-file) and a sensitive
// input, both used by an action that prints them to stdout and stderr
// and writes them into its outputs.
var leakApp = map[string]string{
	"app.toml": "name = \"vault\"\n",
	"inputs.toml": `[[input]]
name = "token"
sensitive = true
required = true
`,
	"secrets.toml": "[[secret]]\nname = \"api_key\"\n",
	"components/a.toml": `type = "action"
[config]
env = { KEY = "{{ .secrets.api_key }}", TOKEN = "{{ .inputs.token }}" }
steps = [{ name = "a", script = "echo key=$KEY token=$TOKEN; echo stderr-key=$KEY >&2; echo leak=$KEY >> $BYOC_OUTPUTS; echo tok=$TOKEN >> $BYOC_OUTPUTS; echo plain=ok >> $BYOC_OUTPUTS" }]
`,
	"installs/acme.toml": "[inputs]\ntoken = \"tok-sensitive-5151\"\n",
}

// Secrets from --secrets-file and sensitive inputs never appear in a
// job's log or outputs, in install get or job get (API and CLI) for a
// viewer token, nor in the agent's support bundle (its state directory
// and its own log included).
func TestSecretsNeverLeakEndToEnd(t *testing.T) {
	const secret, sensitive = "sk-live-secret-8383", "tok-sensitive-5151"
	opts := fast
	opts.WorkflowInterval = 100 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(leakApp)
	secrets := filepath.Join(t.TempDir(), "secrets.env")
	if err := os.WriteFile(secrets, []byte("api_key="+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(t.TempDir(), "agent")
	ag := cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), stateDir, "--secrets-file", secrets)
	waitConnected(t, ims, "acme")
	out := cli.Run(0, "install", "provision", "acme", "--wait")
	if !strings.Contains(out, "succeeded") {
		t.Fatalf("provision:\n%s", out)
	}
	admin := ims.Admin()
	ctx := context.Background()
	jobs := installJobs(t, admin)
	if len(jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(jobs))
	}
	job := jobs[0]
	logs := strings.Join(cluster.Texts(cluster.Logs(t, admin, job.Id)), "\n")
	if !strings.Contains(logs, "key=") || !strings.Contains(logs, "stderr-key=") {
		t.Fatalf("the job's log does not show the step ran:\n%s", logs)
	}
	if job.Outputs["plain"] != "ok" {
		t.Fatalf("the job's outputs lack plain=ok: %v", job.Outputs)
	}

	vt, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "support", Role: imsv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}
	viewer := ims.Client(vt.Msg.Token)
	vcli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "viewer.json"), ims.URL(), vt.Msg.Token)
	seen := map[string]string{"job log": logs}
	for what, fetch := range map[string]func() (string, error){
		"job get (viewer)": func() (string, error) {
			r, err := viewer.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: job.Id}))
			if err != nil {
				return "", err
			}
			b, err := protojson.Marshal(r.Msg)
			return string(b), err
		},
		"job list (viewer)": func() (string, error) {
			r, err := viewer.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{}))
			if err != nil {
				return "", err
			}
			b, err := protojson.Marshal(r.Msg)
			return string(b), err
		},
		"install get (viewer)": func() (string, error) {
			r, err := viewer.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
			if err != nil {
				return "", err
			}
			b, err := protojson.Marshal(r.Msg)
			return string(b), err
		},
		"job logs (viewer)": func() (string, error) {
			return strings.Join(cluster.Texts(cluster.Logs(t, viewer, job.Id)), "\n"), nil
		},
	} {
		s, err := fetch()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seen[what] = s
	}
	for _, args := range [][]string{
		{"job", "get", job.Id}, {"job", "get", job.Id, "--output", "json"}, {"job", "logs", job.Id},
		{"install", "get", "acme"}, {"install", "get", "acme", "--output", "json"}, {"job", "list"},
	} {
		seen["byoc "+strings.Join(args, " ")+" (viewer)"] = vcli.Run(0, args...)
	}

	// The support bundle, with the agent's own log in it.
	agentLog := filepath.Join(t.TempDir(), "agentd.log")
	if err := os.WriteFile(agentLog, []byte(ag.Output()), 0o600); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "bundle.tar.gz")
	cmd := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "support-bundle", "-o", bundle,
		"--state-dir", stateDir, "--secrets-file", secrets, "--agent-log", agentLog, "--ims", ims.URL())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("agentd support-bundle: %v\n%s", err, b)
	}
	files := tarFiles(t, bundle)
	if len(files) == 0 {
		t.Fatal("the support bundle is empty")
	}
	for name, content := range files {
		seen["support bundle "+name] = content
	}

	for what, s := range seen {
		for _, v := range []string{secret, sensitive} {
			if strings.Contains(s, v) {
				t.Errorf("%s shows %q:\n%s", what, v, s)
			}
		}
	}
}

// tarFiles reads a .tar.gz into its files' contents by name.
func tarFiles(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = string(b)
	}
}

// Path traversal in names that become paths: a component's name, its
// file's path in a push, a component type (a plugin's file name), a
// registered plugin type and an enqueued job's type are each refused
// with an error naming the field. (Module and chart archives' entries,
// "../", absolute and symlinks, are refused by their unpackers:
// plugins/terraform TestUntarModuleRefuses and internal/chartpack's
// tests; a module directory holding a symlink by tfmodule.Pack.)
func TestPathTraversalInNamesIsRefused(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	ctx := context.Background()
	push := func(files map[string]string) error {
		req := &imsv1.PushAppRevisionRequest{NoDeploy: true}
		for p, s := range files {
			req.Files = append(req.Files, &imsv1.AppFile{Path: p, Content: []byte(s)})
		}
		_, err := c.PushAppRevision(ctx, connect.NewRequest(req))
		return err
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"component name", map[string]string{"app.toml": "name = \"shop\"\n", "components/a.toml": "name = \"../../etc\"\ntype = \"action\"\n[config]\nsteps = []\n"},
			`"../../etc" is not a valid component name`},
		{"absolute component name", map[string]string{"app.toml": "name = \"shop\"\n", "components/a.toml": "name = \"/etc/passwd\"\ntype = \"action\"\n[config]\nsteps = []\n"},
			`"/etc/passwd" is not a valid component name`},
		{"file path", map[string]string{"app.toml": "name = \"shop\"\n", "components/../../x.toml": "type = \"action\"\n"},
			`"components/../../x.toml" is not a clean relative path`},
		{"absolute file path", map[string]string{"app.toml": "name = \"shop\"\n", "/etc/x.toml": "type = \"action\"\n"},
			`"/etc/x.toml" is not a clean relative path`},
		{"component type", map[string]string{"app.toml": "name = \"shop\"\n", "components/a.toml": "type = \"../../bin/sh\"\n"},
			`no component type "../../bin/sh"`},
	} {
		err := push(tc.files)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: push: %v; want invalid_argument saying %s", tc.name, err, tc.want)
		}
	}
	cluster.NewInstall(t, c, "shop2", "alpha")
	for _, typ := range []string{"../evil", "/usr/bin/evil", "a/../../b", "..", "evil/x"} {
		desc := `{"type":` + strconv.Quote(typ) + `,"version":"1.0.0","protocol":"1.1"}`
		_, err := c.RegisterPluginType(ctx, connect.NewRequest(&imsv1.RegisterPluginTypeRequest{Description: desc}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "is not a valid type name") {
			t.Errorf("RegisterPluginType %q: %v; want invalid_argument saying it is not a valid type name", typ, err)
		}
		_, err = c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "alpha", ComponentType: typ, Operation: "apply"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "component_type") {
			t.Errorf("EnqueueJob of type %q: %v; want invalid_argument naming component_type", typ, err)
		}
	}
}

// One install's agent cannot read another install's jobs, logs or audit
// through the agent API, with a real identity of its own: the audit it
// lists is its own install's chain only, a call signed by it in another
// agent's name is refused, its enrolment token is no operator token, and
// the stream hands it nothing of the other install. (Writes to the other
// install's jobs: TestAgentSeesOnlyItsOwnInstall; break-glass requests:
// TestBreakGlassGrantForOneInstallOnly.)
func TestAgentCannotReadAnotherInstall(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	ctx := context.Background()
	inA, tokA := cluster.NewInstall(t, c, "shop", "alpha")
	inB, tokB := cluster.NewInstall(t, c, "shop", "beta")
	a := cluster.EnrollRaw(t, ims.URL(), tokA)
	b := cluster.EnrollRaw(t, ims.URL(), tokB)
	b.Connect(t, 1)
	// beta runs a job that logs a marker and records audit events.
	jobB := enqueue(t, c, "beta", "echo beta-marker-6161", 60)
	as := b.Assignment(t)
	b.Answer(t, b.Send(t, cluster.Ack(as.JobId, as.FencingToken)))
	b.Answer(t, b.Send(t, cluster.Logs1(as.JobId, as.FencingToken, 1, "beta-marker-6161")))
	b.Answer(t, b.Send(t, cluster.Result(as.JobId, as.FencingToken, agentv1.Outcome_OUTCOME_SUCCEEDED, 0)))
	cluster.WaitJob(t, c, jobB.Id, 5*time.Second, imsv1.JobState_JOB_STATE_SUCCEEDED)

	// alpha's agent connects: nothing of beta comes down its stream.
	a.Connect(t, 1)
	jobA := enqueue(t, c, "alpha", "echo alpha", 60)
	got := a.Assignment(t)
	if got.JobId != jobA.Id || got.InstallId != inA.Id {
		t.Fatalf("alpha's agent was handed %s of install %s", got.JobId, got.InstallId)
	}

	list := func(agentID string, key ed25519.PrivateKey) ([]*agentv1.AuditRecord, error) {
		now := time.Now()
		r, err := a.Client.ListAuditRecords(ctx, connect.NewRequest(&agentv1.ListAuditRecordsRequest{
			AgentId: agentID, Time: timestamppb.New(now), Signature: agentproto.SignListAudit(key, agentID, now)}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Records, nil
	}
	recs, err := list(a.ID, a.Key)
	if err != nil {
		t.Fatalf("alpha's agent lists its audit: %v", err)
	}
	if len(recs) == 0 {
		t.Fatal("alpha's audit chain is empty")
	}
	for _, r := range recs {
		if r.Chain != inA.Id {
			t.Errorf("alpha's agent got a record of chain %s", r.Chain)
		}
		for _, s := range []string{inB.Id, jobB.Id, b.ID, "beta-marker-6161"} {
			if strings.Contains(r.Subject+r.Actor+string(r.Data), s) {
				t.Errorf("alpha's agent got an audit record that mentions %s: %v", s, r)
			}
		}
	}
	// In beta's agent's name, signed with alpha's key: refused.
	if _, err := list(b.ID, a.Key); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("alpha's agent listing beta's audit in its name: %v; want unauthenticated", err)
	}
	// alpha's enrolment token (used) is no operator credential.
	if _, err := ims.Client(tokA).GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: jobB.Id})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("alpha's enrolment token reads beta's job: %v; want unauthenticated", err)
	}
	if _, err := ims.Client(tokA).ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("alpha's enrolment token lists jobs: %v; want unauthenticated", err)
	}
	logs, err := ims.Client(tokA).StreamJobLogs(ctx, connect.NewRequest(&imsv1.StreamJobLogsRequest{JobId: jobB.Id}))
	if err == nil {
		for logs.Receive() {
			t.Errorf("alpha's enrolment token reads beta's log: %v", logs.Msg())
		}
		err = logs.Err()
		logs.Close()
	}
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("alpha's enrolment token streams beta's log: %v; want unauthenticated", err)
	}
}
