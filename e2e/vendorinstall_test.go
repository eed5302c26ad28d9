package e2e

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The vendor's build agent's reserved install (_vendor, made with the
// first build agent token) is no customer's: byoc install list and the
// fleet watch leave it out; install list --all and --app _vendor show it;
// install get _vendor still reads it.
func TestInstallListLeavesTheVendorOut(t *testing.T) {
	skipShort(t)
	ims, cli := vendorWorld(t)

	names := func(args ...string) string {
		t.Helper()
		var list []struct{ Name string }
		out := cli.Run(0, append([]string{"install", "list", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var n []string
		for _, in := range list {
			n = append(n, in.Name)
		}
		return strings.Join(n, " ")
	}
	if got := names(); got != "acme" {
		t.Fatalf("install list: %q, want acme alone", got)
	}
	if got := names("-l", "!tier"); got != "acme" {
		t.Fatalf("install list -l '!tier': %q, want acme alone", got)
	}
	if got := names("--all"); got != "_vendor acme" && got != "acme _vendor" {
		t.Fatalf("install list --all: %q", got)
	}
	if got := names("--app", "_vendor"); got != "_vendor" {
		t.Fatalf("install list --app _vendor: %q", got)
	}
	if out := cli.Run(0, "install", "get", "_vendor"); !strings.Contains(out, "_vendor") {
		t.Fatalf("install get _vendor:\n%s", out)
	}

	// The fleet watch (the console's fleet view) sends acme alone.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := ims.Admin().WatchInstalls(ctx, connect.NewRequest(&imsv1.WatchInstallsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() {
		t.Fatalf("watch: %v", st.Err())
	}
	var got []string
	for _, s := range st.Msg().GetInstalls() {
		got = append(got, s.GetInstall().GetName())
	}
	if strings.Join(got, " ") != "acme" {
		t.Fatalf("fleet watch: %v, want acme alone", got)
	}
}

// A build job runs on the vendor's build agent's install: byoc job list,
// job get and audit list name it _vendor, as install list --all does (job
// list used to show its id, "vendor", which audit list also shows for the
// vendor-wide chain).
func TestBuildJobsNameTheVendorInstall(t *testing.T) {
	skipShort(t)
	_, cli := vendorWorld(t)
	var started struct{ Job struct{ ID string } }
	out := cli.Run(0, "build", "sync", "registry.example.com/hello:1.0", "--repo", "hello", "-o", "json")
	if err := json.Unmarshal([]byte(out), &started); err != nil || started.Job.ID == "" {
		t.Fatalf("build sync -o json: %v\n%s", err, out)
	}
	job := started.Job.ID

	row := func(out, first string) []string {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == first {
				return f
			}
		}
		t.Fatalf("no row for %s:\n%s", first, out)
		return nil
	}
	list := cli.Run(0, "job", "list")
	if f := row(list, job); f[1] != "_vendor" {
		t.Fatalf("job list names the build job's install %q, want _vendor:\n%s", f[1], list)
	}
	if got := cli.Run(0, "job", "list", "--install", "_vendor"); !strings.Contains(got, job) {
		t.Fatalf("job list --install _vendor leaves out %s:\n%s", job, got)
	}
	get := cli.Run(0, "job", "get", job)
	if !regexp.MustCompile(`(?m)^Install:?\s+_vendor$`).MatchString(get) {
		t.Fatalf("job get does not name the install _vendor:\n%s", get)
	}
	audit := cli.Run(0, "audit", "list")
	var vendorChain, buildChain bool
	for _, l := range strings.Split(audit, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) < 4:
		case f[1] == "_vendor" && f[3] == "job.queued":
			buildChain = true
		case f[1] == "vendor" && f[3] == "job.queued":
			t.Fatalf("audit list names the build install's chain vendor, as it names the vendor-wide chain:\n%s", audit)
		case f[1] == "vendor":
			vendorChain = true
		}
	}
	if !buildChain || !vendorChain {
		t.Fatalf("audit list: want the build job's record on _vendor (%v) and vendor-wide records on vendor (%v):\n%s", buildChain, vendorChain, audit)
	}
}

// byoc app list leaves out the build agent's reserved app (_vendor);
// --all lists it, its description saying it is reserved; app get _vendor
// reads it as install get _vendor does; a new app may not take a name
// with a leading underscore, and the error says what a name may be.
func TestAppListLeavesTheVendorOut(t *testing.T) {
	skipShort(t)
	_, cli := vendorWorld(t)

	if out := cli.Run(0, "app", "list"); strings.Contains(out, "_vendor") || !strings.Contains(out, "shop") {
		t.Fatalf("app list: want shop alone:\n%s", out)
	}
	if out := cli.Run(0, "app", "list", "-o", "json"); strings.Contains(out, "_vendor") {
		t.Fatalf("app list -o json lists _vendor:\n%s", out)
	}
	all := cli.Run(0, "app", "list", "--all")
	if !regexp.MustCompile(`(?m)^_vendor\s.*\(reserved\)`).MatchString(all) || !strings.Contains(all, "shop") {
		t.Fatalf("app list --all: want shop and _vendor marked reserved:\n%s", all)
	}
	if out := cli.Run(0, "app", "get", "_vendor"); !strings.Contains(out, "_vendor") {
		t.Fatalf("app get _vendor:\n%s", out)
	}
	// install list --all still names the build install's app.
	ins := cli.Run(0, "install", "list", "--all")
	if !regexp.MustCompile(`(?m)^_vendor\s+_vendor\s`).MatchString(ins) {
		t.Fatalf("install list --all: want _vendor of app _vendor:\n%s", ins)
	}
	out, errOut, code := cli.Exec("app", "create", "_mine")
	if code == 0 || !strings.Contains(out+errOut, `"_mine" is not a valid name`) {
		t.Fatalf("app create _mine: exit %d\n%s%s", code, out, errOut)
	}
}

// The build agent runs build jobs only and an install's agent never one:
// imsd refuses either at enqueue, naming the field, and queues nothing
// (before, an action job on _vendor waited for the build agent, which has
// no action type, and a build job on a customer's install for its agent).
func TestVendorInstallRunsBuildJobsOnly(t *testing.T) {
	skipShort(t)
	ims, cli := vendorWorld(t)
	ctx := context.Background()
	for _, tt := range []struct{ install, typ, want string }{
		{"_vendor", "action", `install: "_vendor" is the vendor's build install: its agent runs build jobs only (byoc build), not "action" jobs`},
		{"acme", "build", `component_type: build jobs run on the vendor's build agent only (byoc build), not on install "acme"`},
	} {
		_, err := ims.Admin().EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: tt.install, ComponentType: tt.typ, Operation: "apply"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("enqueue %s on %s: %v, want invalid argument %q", tt.typ, tt.install, err, tt.want)
		}
		_, err = ims.Admin().EnqueueJobs(ctx, connect.NewRequest(&imsv1.EnqueueJobsRequest{Jobs: []*imsv1.EnqueueJobRequest{
			{Install: "acme", ComponentType: "action", Operation: "apply"},
			{Install: tt.install, ComponentType: tt.typ, Operation: "apply"}}}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("enqueue a batch with %s on %s: %v, want invalid argument %q", tt.typ, tt.install, err, tt.want)
		}
	}
	r, err := ims.Admin().ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Msg.Jobs) != 0 {
		t.Errorf("%d jobs queued, want none", len(r.Msg.Jobs))
	}
	// Nor another install of the reserved app, which install list would
	// hide as it hides the build install.
	_, err = ims.Admin().CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: "_vendor", Name: "hidden"}))
	if want := `app: "_vendor" is reserved for the vendor's build install`; connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), want) {
		t.Errorf("install create in _vendor: %v, want invalid argument %q", err, want)
	}
	if out := cli.Run(0, "install", "list", "--all", "-o", "json"); strings.Contains(out, "hidden") {
		t.Errorf("an install was made in the reserved app:\n%s", out)
	}
	// Nor a revision of it (the app config's name rule refuses the
	// leading underscore), whose deploy would send the build agent jobs
	// it has no type for.
	_, err = ims.Admin().PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: []*imsv1.AppFile{
		{Path: "app.toml", Content: []byte("name = \"_vendor\"\n")},
		{Path: "components/db.toml", Content: []byte("type = \"action\"\n[config]\nsteps = [{ name = \"db\", script = \"true\" }]\n")},
	}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("push of an app named _vendor: %v, want invalid argument", err)
	}
	revs, err := ims.Admin().ListAppRevisions(ctx, connect.NewRequest(&imsv1.ListAppRevisionsRequest{App: "_vendor"}))
	if err != nil || len(revs.Msg.Revisions) != 0 {
		t.Errorf("revisions of _vendor: %v, %v; want none", revs, err)
	}
}

// vendorWorld starts imsd with app shop's install acme and the build
// agent's reserved install (_vendor, made with the first build agent
// token).
func vendorWorld(t *testing.T) (*cluster.IMS, *cluster.CLI) {
	t.Helper()
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	cli.Run(0, "build", "agent-token")
	return ims, cli
}

// A label selector grant never covers the build agent's install, though
// it has no labels and a negative selector (tier!=gold, !legacy) matches
// no labels: an operator so scoped may not enqueue a build on the build
// agent (StartBuild needs admin on everything), issue an enrolment token
// for its install, or see it, its jobs or its audit chain.
func TestSelectorGrantLeavesTheVendorOut(t *testing.T) {
	skipShort(t)
	ims, _ := vendorWorld(t)
	admin := ims.Admin()
	ctx := context.Background()
	tok, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "not-gold", Role: imsv1.Role_ROLE_OPERATOR, Selector: "tier!=gold"}))
	if err != nil {
		t.Fatal(err)
	}
	op := ims.Client(tok.Msg.Token)
	// The grant does cover acme (no tier label).
	if _, err := op.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"})); err != nil {
		t.Fatalf("get acme: %v", err)
	}
	_, err = op.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "_vendor", ComponentType: "build", Operation: "apply"}))
	wantCode(t, err, connect.CodePermissionDenied, "install _vendor")
	_, err = op.EnqueueJobs(ctx, connect.NewRequest(&imsv1.EnqueueJobsRequest{Jobs: []*imsv1.EnqueueJobRequest{{Install: "_vendor", ComponentType: "build", Operation: "apply"}}}))
	wantCode(t, err, connect.CodePermissionDenied, "install _vendor")
	_, err = op.CreateEnrollmentToken(ctx, connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "_vendor"}))
	wantCode(t, err, connect.CodePermissionDenied, "install _vendor")
	_, err = op.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "_vendor"}))
	wantCode(t, err, connect.CodePermissionDenied, "install _vendor")
	_, err = op.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "_vendor"}))
	wantCode(t, err, connect.CodePermissionDenied, "install _vendor")

	ins, err := op.ListInstalls(ctx, connect.NewRequest(&imsv1.ListInstallsRequest{IncludeVendor: true}))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ins.Msg.Installs {
		if in.Name != "acme" {
			t.Errorf("install list --all shows %s to a selector grant", in.Name)
		}
	}
	evs, err := op.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Msg.Events {
		if e.Chain == "vendor" {
			t.Fatalf("the audit shows the build install's chain to a selector grant: %s %s", e.Kind, e.Subject)
		}
	}
}
