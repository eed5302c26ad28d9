package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/protobuf/types/known/structpb"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/registry"
	"github.com/byoc-dev/byoc/internal/chartpack"
	"github.com/byoc-dev/byoc/internal/demoimage"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/plugins/terraform"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// custody is a vendor setup for the custody tests: a source registry
// (anonymous, like a public one), imsd as the token server of a real
// docker-registry with token auth (the vendor registry), and the build
// agent enrolled with a build agent token.
type custody struct {
	ims    *cluster.IMS
	cli    *cluster.CLI
	source *ocitest.Registry
	vendor *ocitest.Registry
	// offset moves imsd's clock.
	offset *atomic.Int64
	// layouts holds source OCI layouts on the build agent's machine,
	// which the build agent's plugins may read (--sandbox-read-only).
	layouts string
}

func startCustody(t *testing.T) *custody {
	t.Helper()
	return startCustodyWith(t, fast)
}

// startCustodyWith is startCustody with imsd's options o (its data dir,
// address, registry URL and clock are set here).
func startCustodyWith(t *testing.T, o cluster.Options) *custody {
	t.Helper()
	return startCustodyBuild(t, o)
}

// startCustodyBuild is startCustodyWith with buildArgs added to the
// build agent's command line; "IMSD-SIGNING-KEY" in one stands for
// imsd's job signing key file.
func startCustodyBuild(t *testing.T, o cluster.Options, buildArgs ...string) *custody {
	t.Helper()
	ocitest.Need(t)
	// The registry reads its token certificate at start, and imsd needs
	// the registry's URL at start: imsd's address and key come first.
	dataDir, imsAddr := t.TempDir(), cluster.FreeAddr(t)
	if _, err := registry.LoadOrCreateSigner(dataDir, ""); err != nil {
		t.Fatal(err)
	}
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{
		AuthYAML: registry.AuthYAML("http://"+imsAddr+"/v2/token", "", registry.CertPath(dataDir))})
	offset := &atomic.Int64{}
	o.DataDir, o.Addr, o.RegistryURL = dataDir, imsAddr, vendor.URL()
	o.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	ims := cluster.StartIMS(t, o)
	c := &custody{ims: ims, cli: cluster.NewCLI(t, ims), offset: offset, vendor: vendor}
	c.source = ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	var tok struct {
		EnrollmentToken struct{ Token string } `json:"enrollmentToken"`
	}
	if err := json.Unmarshal([]byte(c.cli.Run(0, "build", "agent-token", "-o", "json")), &tok); err != nil || tok.EnrollmentToken.Token == "" {
		t.Fatalf("build agent token: %v %+v", err, tok)
	}
	c.layouts = t.TempDir()
	args := []string{"--role", "build", "--sandbox-read-only", c.layouts}
	for _, a := range buildArgs {
		args = append(args, strings.ReplaceAll(a, "IMSD-SIGNING-KEY", filepath.Join(dataDir, "signing.key")))
	}
	cluster.StartAgent(t, ims.URL(), tok.EnrollmentToken.Token, filepath.Join(t.TempDir(), "build-agent"), args...)
	waitConnected(t, ims, "_vendor")
	return c
}

// build syncs src (on the source registry) into repo and returns the
// build as the CLI prints it.
func (c *custody) build(t *testing.T, src, repo string) *imsv1.Build {
	t.Helper()
	return printedBuild(t, c.cli.Run(0, "build", "sync", c.source.Host+"/"+src, "--repo", repo, "--wait", "-o", "json"))
}

// printedBuild reads the build that byoc build ... --wait -o json prints
// after the job's log lines (JSON Lines) and before its end line.
func printedBuild(t *testing.T, out string) *imsv1.Build {
	t.Helper()
	obj := "\n" + out
	i := strings.LastIndex(obj, "\n{\n")
	if i >= 0 {
		obj = obj[i:]
		if j := strings.Index(obj, "\n}"); j >= 0 {
			obj = obj[:j+2]
		}
	}
	var b struct {
		ID, Repository, Digest, Source, SourceDigest, Kind, MediaType string
	}
	if i < 0 || json.Unmarshal([]byte(obj), &b) != nil || b.Digest == "" {
		t.Fatalf("no build printed:\n%s", out)
	}
	return &imsv1.Build{Id: b.ID, Repository: b.Repository, Digest: b.Digest, Source: b.Source, SourceDigest: b.SourceDigest, Kind: b.Kind, MediaType: b.MediaType}
}

// mint signs a registry token with imsd's token key, as the test's own
// window into the vendor registry.
func (c *custody) mint(t *testing.T, scopes ...string) string {
	t.Helper()
	s, err := registry.LoadOrCreateSigner(c.ims.DataDir, "")
	if err != nil {
		t.Fatal(err)
	}
	var sc []registry.Scope
	for _, v := range scopes {
		p, err := registry.ParseScope(v)
		if err != nil {
			t.Fatal(err)
		}
		sc = append(sc, p)
	}
	tok, err := s.Mint("test", sc, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// repo opens repository name on host over plain HTTP, with token as
// its bearer token when set.
func repo(t *testing.T, host, name, token string) *ocicopy.Repo {
	t.Helper()
	r, err := ocicopy.Open(t.Context(), ocicopy.Registry{Host: host, PlainHTTP: true}, name, ocicopy.Credentials{AccessToken: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// pushImage pushes an image of one seeded layer of size bytes to r as tag.
func pushImage(t *testing.T, r *ocicopy.Repo, tag string, seed uint64, size int64) ocispec.Descriptor {
	t.Helper()
	d, err := ocitest.Image(t.Context(), r, ocitest.ImageSpec{Seed: seed, Layers: []int64{size}})
	if err == nil {
		err = r.Tag(t.Context(), d, tag)
	}
	if err != nil {
		t.Fatalf("push image to %s: %v", r.Name(), err)
	}
	d.Platform = nil
	return d
}

// pushIndex pushes a multi-arch index (amd64, arm64) to r as tag.
func pushIndex(t *testing.T, r *ocicopy.Repo, tag string, seed uint64, size int64) ocispec.Descriptor {
	t.Helper()
	ctx := t.Context()
	var ms []ocispec.Descriptor
	for i, arch := range []string{"amd64", "arm64"} {
		d, err := ocitest.Image(ctx, r, ocitest.ImageSpec{Seed: seed + uint64(10*i), Layers: []int64{size}, Platform: &ocispec.Platform{OS: "linux", Architecture: arch}})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, d)
	}
	d, err := ocitest.Index(ctx, r, ms...)
	if err == nil {
		err = r.Tag(ctx, d, tag)
	}
	if err != nil {
		t.Fatalf("push index to %s: %v", r.Name(), err)
	}
	return d
}

// exchange trades grant g at imsd's token endpoint as agent ag would,
// asking for scopes (the grant's when none); it returns the token or the
// refusal's status and text.
func exchange(t *testing.T, ims *cluster.IMS, ag *cluster.RawAgent, g *agentv1.RegistryGrant, at time.Time, scopes ...string) (token string, status int, msg string) {
	t.Helper()
	if len(scopes) == 0 {
		scopes = g.Scopes
	}
	q := url.Values{"service": {g.Service}, "scope": scopes}
	req, _ := http.NewRequest("GET", ims.URL()+"/v2/token?"+q.Encode(), nil)
	req.SetBasicAuth(ag.ID, agentproto.GrantExchangePassword(ag.Key, ag.ID, g.Id, g.Secret, at))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Token  string
		Errors []struct{ Message string }
	}
	_ = json.Unmarshal(b, &r)
	if len(r.Errors) > 0 {
		msg = r.Errors[0].Message
	}
	return r.Token, resp.StatusCode, msg
}

// imageJob queues an image job for install with source and returns the
// grant its assignment carries to raw agent ag.
func imageJob(t *testing.T, ims *cluster.IMS, ag *cluster.RawAgent, install, source string) (*agentv1.JobAssignment, *agentv1.RegistryGrant) {
	t.Helper()
	cfg, _ := structpb.NewStruct(map[string]any{"source": source})
	if _, err := ims.Admin().EnqueueJob(context.Background(), connect.NewRequest(&imsv1.EnqueueJobRequest{
		Install: install, ComponentType: "image", Operation: "apply", Config: cfg})); err != nil {
		t.Fatal(err)
	}
	as := ag.Assignment(t)
	if as.RegistryGrant == nil {
		t.Fatalf("image job assignment carries no registry grant: %v", as)
	}
	return as, as.RegistryGrant
}

// TestCustodySyncAndPullGrants syncs a public-style image and a
// multi-arch index from a source registry into the vendor registry
// through the build agent (agentd --role build), then pulls them into an
// install registry with the one-time grant an image job carries (the
// install agent here is a raw protocol agent, so that each refusal can
// be driven by hand): digests equal end to end, builds recorded, and
// every misuse of a grant refused by imsd, and of its token by the
// registry itself.
func TestCustodySyncAndPullGrants(t *testing.T) {
	skipShort(t)
	c := startCustody(t)
	hello := pushImage(t, repo(t, c.source.Host, "library/hello", ""), "1.0", 1, 64<<10)
	multi := pushIndex(t, repo(t, c.source.Host, "library/multi", ""), "1.0", 2, 32<<10)

	bh := c.build(t, "library/hello:1.0", "hello")
	bm := c.build(t, "library/multi:1.0", "multi")
	if bh.Digest != hello.Digest.String() || bm.Digest != multi.Digest.String() || bm.MediaType != multi.MediaType {
		t.Fatalf("builds %s (%s) and %s (%s), want the source digests %s and %s", bh.Digest, bh.MediaType, bm.Digest, bm.MediaType, hello.Digest, multi.Digest)
	}
	if bh.Source != c.source.Host+"/library/hello:1.0" || bh.SourceDigest != bh.Digest || bh.Kind != "sync" {
		t.Fatalf("lineage of hello: %+v", bh)
	}
	list := c.cli.Run(0, "build", "list")
	for _, want := range []string{"hello@" + bh.Digest, "multi@" + bm.Digest, "library/multi:1.0"} {
		if !strings.Contains(list, want) {
			t.Fatalf("build list lacks %q:\n%s", want, list)
		}
	}
	ctx := context.Background()
	// The vendor registry holds the whole index: both platforms.
	for _, m := range []string{bm.Digest} {
		if _, err := repo(t, c.vendor.Host, "multi", c.mint(t, "repository:multi:pull")).Resolve(ctx, m); err != nil {
			t.Fatalf("vendor registry lacks multi@%s: %v", m, err)
		}
	}

	// The install side.
	_, tokA := cluster.NewInstall(t, c.ims.Admin(), "shop", "acme")
	_, tokB := cluster.NewInstall(t, c.ims.Admin(), "shop", "globex")
	agA := cluster.EnrollRaw(t, c.ims.URL(), tokA)
	agA.Connect(t, 4)
	agB := cluster.EnrollRaw(t, c.ims.URL(), tokB)
	agB.Connect(t, 4)
	installReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})

	as, g := imageJob(t, c.ims, agA, "acme", "multi@"+bm.Digest)
	if strings.Join(g.Scopes, " ") != "repository:multi:pull" || g.Registry != "http://"+c.vendor.Host {
		t.Fatalf("grant %v: want pull of exactly multi on the vendor registry", g)
	}
	// Another install's agent cannot use it, nor can it ask for more.
	if _, st, msg := exchange(t, c.ims, agB, g, time.Now()); st != 401 || !strings.Contains(msg, "belongs to another install") {
		t.Fatalf("another install's exchange: %d %q", st, msg)
	}
	if _, st, msg := exchange(t, c.ims, agA, g, time.Now(), "repository:hello:pull"); st != 401 || !strings.Contains(msg, "scope repository:hello:pull is not in the grant") {
		t.Fatalf("wrong repository: %d %q", st, msg)
	}
	if _, st, msg := exchange(t, c.ims, agA, g, time.Now(), "repository:multi:pull,push"); st != 401 || !strings.Contains(msg, "not in the grant") {
		t.Fatalf("push on a pull grant: %d %q", st, msg)
	}
	// Someone with the grant and the agent's id but not its key gets
	// nothing (and writes nothing).
	if _, st, msg := exchange(t, c.ims, &cluster.RawAgent{ID: agA.ID, Key: agB.Key}, g, time.Now()); st != 401 || !strings.Contains(msg, "not signed by the agent's key") {
		t.Fatalf("exchange signed by another key: %d %q", st, msg)
	}
	// Refusals do not spend it: the agent's own exchange works, once.
	tok, st, msg := exchange(t, c.ims, agA, g, time.Now())
	if st != 200 || tok == "" {
		t.Fatalf("exchange: %d %q", st, msg)
	}
	// The token lives as long as the job may (its time limit, 1h here).
	if parts := strings.Split(tok, "."); len(parts) != 3 {
		t.Fatalf("token %q is not a JWT", tok)
	} else {
		payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
		var claims struct {
			Iat, Exp int64
			Access   []struct{ Name string }
		}
		if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp-claims.Iat != 3600 || len(claims.Access) != 1 || claims.Access[0].Name != "multi" {
			t.Fatalf("token claims %s (%v): want a 1h token for multi only", payload, err)
		}
	}
	if _, st, msg := exchange(t, c.ims, agA, g, time.Now()); st != 401 || !strings.Contains(msg, "already exchanged") {
		t.Fatalf("second exchange: %d %q", st, msg)
	}
	// The copy the image type makes (oras-go, by digest): vendor -> install.
	src := repo(t, c.vendor.Host, "multi", tok)
	dst := repo(t, installReg.Host, "multi", "")
	got, err := oras.Copy(ctx, src, bm.Digest, dst, bm.Digest, oras.DefaultCopyOptions)
	if err != nil || got.Digest.String() != bm.Digest {
		t.Fatalf("copy to the install registry: %v, %v", got.Digest, err)
	}
	if d, err := dst.Resolve(ctx, bm.Digest); err != nil || d.Digest.String() != multi.Digest.String() {
		t.Fatalf("install registry holds %v (%v), want the source digest %s", d.Digest, err, multi.Digest)
	}
	// The registry itself refuses the token outside its scope.
	if _, err := repo(t, c.vendor.Host, "hello", tok).Resolve(ctx, bh.Digest); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("the vendor registry let a multi pull token read hello: %v", err)
	}
	if _, err := ocitest.Image(ctx, repo(t, c.vendor.Host, "multi", tok), ocitest.ImageSpec{Seed: 99, Layers: []int64{10}}); err == nil {
		t.Fatal("the vendor registry let a pull token push")
	}
	agA.Send(t, cluster.Ack(as.JobId, as.FencingToken))

	// A grant not exchanged within its minutes is refused.
	_, g2 := imageJob(t, c.ims, agA, "acme", "hello@"+bh.Digest)
	c.offset.Store(int64(6 * time.Minute))
	if _, st, msg := exchange(t, c.ims, agA, g2, time.Now().Add(6*time.Minute)); st != 401 || !strings.Contains(msg, "expired") {
		t.Fatalf("expired grant: %d %q", st, msg)
	}
	c.offset.Store(0)

	// Every exchange and refusal is in the install's audit chain.
	audit := c.cli.Run(0, "audit", "list", "--install", "acme", "-o", "json")
	for _, kind := range []string{"registry.grant_issued", "registry.grant_exchanged", "registry.grant_refused"} {
		if !strings.Contains(audit, kind) {
			t.Fatalf("audit of acme lacks %s:\n%s", kind, audit)
		}
	}
	if n := strings.Count(audit, "registry.grant_refused"); n < 3 {
		t.Fatalf("audit holds %d refused exchanges of acme's grants, want at least 3 (wrong repository, push, reuse, expiry)", n)
	}
	if gl := c.cli.Run(0, "audit", "list", "--install", "globex", "-o", "json"); strings.Contains(gl, "registry.grant_exchanged") {
		t.Fatalf("globex exchanged a grant:\n%s", gl)
	}
}

// A build agent token enrols only a build agent, and an install's token
// only an install agent; an install's agent refuses an image job by tag,
// or from another registry than the vendor's, before any plugin starts.
func TestCustodyRolesAndTagRefusal(t *testing.T) {
	skipShort(t)
	c := startCustody(t)
	_, tok := cluster.NewInstall(t, c.ims.Admin(), "shop", "acme")
	p := cluster.StartAgent(t, c.ims.URL(), tok, filepath.Join(t.TempDir(), "wrong-role"), "--role", "build")
	cluster.Eventually(t, 30*time.Second, "agentd --role build with an install token to fail", p.Exited)
	if out := p.Output(); !strings.Contains(out, "a build agent (--role build) needs a build agent token") {
		t.Fatalf("agentd --role build with an install's token:\n%s", out)
	}
	_, tok2 := cluster.NewInstall(t, c.ims.Admin(), "shop", "initech")
	cluster.StartAgent(t, c.ims.URL(), tok2, filepath.Join(t.TempDir(), "agent"))
	waitConnected(t, c.ims, "initech")
	for source, why := range map[string]string{
		"hello:1.0": `image source "hello:1.0" is a tag; components reference builds by digest`,
		// Pulled from anywhere but the vendor registry, it would bypass
		// custody (no build, no lineage).
		"evil.example/web@sha256:" + strings.Repeat("ab", 32): `names registry "evil.example": components reference builds in the vendor registry`,
	} {
		cfg, _ := structpb.NewStruct(map[string]any{"source": source})
		res, err := c.ims.Admin().EnqueueJob(context.Background(), connect.NewRequest(&imsv1.EnqueueJobRequest{
			Install: "initech", ComponentType: "image", Operation: "apply", Config: cfg}))
		if err != nil {
			t.Fatal(err)
		}
		j := cluster.WaitJob(t, c.ims.Admin(), res.Msg.Job.Id, 30*time.Second, imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_REFUSED)
		if !strings.HasPrefix(j.Error, "refused: ") || !strings.Contains(j.Error, why) {
			t.Fatalf("image job of source %s ended: %q", source, j.Error)
		}
	}
}

// shopApp is an app of image component web naming build web
// (REPOSITORY@DIGEST) and, when given, component multi naming build
// multi[0].
func shopApp(web string, multi ...string) map[string]string {
	app := map[string]string{
		"app.toml":            "name = \"shop\"\n",
		"components/web.toml": "type = \"image\"\n[config]\nsource = \"" + web + "\"\n",
		"installs/acme.toml":  "",
	}
	if len(multi) > 0 {
		app["components/multi.toml"] = "type = \"image\"\n[config]\nsource = \"" + multi[0] + "\"\n"
	}
	return app
}

// workflow starts a workflow of kind on install and waits for its end.
func runWorkflow(t *testing.T, c *custody, kind imsv1.WorkflowKind) *imsv1.Workflow {
	t.Helper()
	ctx := context.Background()
	res, err := c.ims.Admin().StartWorkflow(ctx, connect.NewRequest(&imsv1.StartWorkflowRequest{Install: "acme", Kind: kind}))
	if err != nil {
		t.Fatal(err)
	}
	var wf *imsv1.Workflow
	cluster.Eventually(t, 60*time.Second, "workflow "+res.Msg.Workflow.Id+" to end", func() bool {
		r, err := c.ims.Admin().GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: res.Msg.Workflow.Id}))
		if err != nil {
			return false
		}
		wf = r.Msg.Workflow
		switch wf.State {
		case imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED, imsv1.WorkflowState_WORKFLOW_STATE_FAILED, imsv1.WorkflowState_WORKFLOW_STATE_CANCELLED:
			return true
		}
		return false
	})
	return wf
}

// TestCustodyDeployLineageAndOutage deploys image components for real
// (an image and a multi-arch index):
// source registry -> vendor registry (build agent) -> install registry
// (the install's agentd and the image type, with the deploy's one-time
// grant); byoc install images shows the chain by digest. Then, with the
// vendor registry stopped, a deploy of a new build fails saying so and
// changes nothing in the install; once it is back, the deploy succeeds.
func TestCustodyDeployLineageAndOutage(t *testing.T) {
	skipShort(t)
	c := startCustody(t)
	src := repo(t, c.source.Host, "library/hello", "")
	v1 := pushImage(t, src, "1.0", 1, 128<<10)
	b1 := c.build(t, "library/hello:1.0", "hello")
	vm := pushIndex(t, repo(t, c.source.Host, "library/multi", ""), "1.0", 5, 32<<10)
	bm := c.build(t, "library/multi:1.0", "multi")
	if b1.Digest != v1.Digest.String() || bm.Digest != vm.Digest.String() {
		t.Fatalf("builds %s and %s, want the source digests %s and %s", b1.Digest, bm.Digest, v1.Digest, vm.Digest)
	}
	installReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	pushed := c.cli.PushApp(shopApp("hello@"+b1.Digest, "multi@"+bm.Digest))
	cluster.StartAgent(t, c.ims.URL(), pushed.EnrollToken(t), filepath.Join(t.TempDir(), "agent"),
		"--install-registry", "http://"+installReg.Host)
	waitConnected(t, c.ims, "acme")

	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("provision ended %v:\n%s", wf.State, c.cli.Run(-1, "workflow", "get", wf.Id))
	}
	ctx := context.Background()
	inst := repo(t, installReg.Host, "hello", "")
	if d, err := inst.Resolve(ctx, b1.Digest); err != nil || d.Digest != v1.Digest {
		t.Fatalf("install registry: %v, %v; want hello@%s", d.Digest, err, v1.Digest)
	}
	// The index came whole: every platform's manifest is there.
	instMulti := repo(t, installReg.Host, "multi", "")
	di, err := instMulti.Resolve(ctx, bm.Digest)
	if err != nil || di.Digest != vm.Digest {
		t.Fatalf("install registry: %v, %v; want multi@%s", di.Digest, err, vm.Digest)
	}
	raw, err := content.FetchAll(ctx, instMulti, di)
	var idx ocispec.Index
	if err != nil || json.Unmarshal(raw, &idx) != nil || len(idx.Manifests) != 2 {
		t.Fatalf("index in the install registry: %s, %v", raw, err)
	}
	for _, m := range idx.Manifests {
		if ok, err := instMulti.Exists(ctx, m); err != nil || !ok {
			t.Fatalf("the install registry lacks the %s manifest %s: %v", m.Platform.Architecture, m.Digest, err)
		}
	}
	out := c.cli.Run(0, "install", "images", "acme")
	for _, want := range []string{
		"source   " + c.source.Host + "/library/hello:1.0  (" + b1.Digest + ")",
		"vendor   hello@" + b1.Digest,
		"install  " + installReg.Host + "/hello@" + b1.Digest,
		"vendor   multi@" + bm.Digest,
		"install  " + installReg.Host + "/multi@" + bm.Digest,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("install images lacks %q:\n%s", want, out)
		}
	}
	var imgs []struct {
		Component, VendorDigest, InstallDigest string
		CopyTime                               string
		Build                                  struct{ Source string }
	}
	if err := json.Unmarshal([]byte(c.cli.Run(0, "install", "images", "acme", "-o", "json")), &imgs); err != nil || len(imgs) != 2 {
		t.Fatalf("install images -o json: %+v, %v", imgs, err)
	}
	for _, im := range imgs {
		want := map[string]string{"web": b1.Digest, "multi": bm.Digest}[im.Component]
		if want == "" || im.VendorDigest != want || im.InstallDigest != want || im.CopyTime == "" || im.Build.Source == "" {
			t.Fatalf("install images -o json: %+v", imgs)
		}
	}

	// A new build; then the vendor registry goes down before the deploy.
	v2 := pushImage(t, src, "2.0", 2, 128<<10)
	b2 := c.build(t, "library/hello:2.0", "hello")
	c.cli.PushApp(shopApp("hello@"+b2.Digest, "multi@"+bm.Digest))
	c.vendor.Stop()
	wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE)
	if wf.State != imsv1.WorkflowState_WORKFLOW_STATE_FAILED {
		t.Fatalf("deploy with the vendor registry down ended %v", wf.State)
	}
	jobs, err := c.ims.Admin().ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	var failed *imsv1.Job
	for _, j := range jobs.Msg.Jobs {
		if j.State == imsv1.JobState_JOB_STATE_FAILED {
			failed = j
		}
	}
	if failed == nil || !strings.Contains(failed.Error, "vendor registry") || !strings.Contains(failed.Error, "unreachable") {
		t.Fatalf("the failed deploy's job says %q, want the vendor registry unreachable", failed.GetError())
	}
	if _, err := inst.Resolve(ctx, b2.Digest); err == nil {
		t.Fatal("the install registry holds the new build after a failed deploy")
	}
	if d, err := inst.Resolve(ctx, b1.Digest); err != nil || d.Digest != v1.Digest {
		t.Fatalf("what the install ran is gone: %v", err)
	}
	if out := c.cli.Run(0, "install", "images", "acme"); !strings.Contains(out, "vendor   hello@"+b1.Digest) {
		t.Fatalf("install images after the failed deploy:\n%s", out)
	}

	// Back up: the deploy succeeds.
	c.vendor.Start()
	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("deploy after the vendor registry is back ended %v", wf.State)
	}
	if d, err := inst.Resolve(ctx, b2.Digest); err != nil || d.Digest != v2.Digest {
		t.Fatalf("install registry after the deploy: %v, %v", d.Digest, err)
	}
	if out := c.cli.Run(0, "install", "images", "acme"); !strings.Contains(out, "vendor   hello@"+b2.Digest) || !strings.Contains(out, c.source.Host+"/library/hello:2.0") {
		t.Fatalf("install images after the deploy:\n%s", out)
	}
}

// byoc build package turns a Helm chart directory into an OCI artifact in
// the vendor registry through the build agent, laid out as `helm push`
// does (so the helm type reads it), with the digest the chart directory
// packs to, the same when packaged again after the files' times changed.
func TestCustodyPackageChart(t *testing.T) {
	skipShort(t)
	c := startCustody(t)
	dir := filepath.Join(t.TempDir(), "api")
	cluster.WriteApp(t, dir, map[string]string{
		"Chart.yaml":                "apiVersion: v2\nname: api\nversion: 1.4.0\n",
		"values.yaml":               "replicas: 2\n",
		"templates/deployment.yaml": "kind: Deployment\n",
	})
	b := printedBuild(t, c.cli.Run(0, "build", "package", dir, "--kind", "helm", "--repo", "charts/api", "--wait", "-o", "json"))
	if b.Kind != "helm" || b.Source != "api" || b.Repository != "charts/api" || b.MediaType != ocispec.MediaTypeImageManifest {
		t.Fatalf("package build: %+v", b)
	}
	ctx := context.Background()
	r := repo(t, c.vendor.Host, "charts/api", c.mint(t, "repository:charts/api:pull"))
	d, err := r.Resolve(ctx, b.Digest)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := content.FetchAll(ctx, r, d)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	// As `helm push` lays a chart out, so the helm type reads it; the same
	// digest as the chart packed from its directory.
	if err := json.Unmarshal(raw, &m); err != nil || m.Config.MediaType != chartpack.ConfigMediaType || len(m.Layers) != 1 ||
		m.Layers[0].MediaType != chartpack.LayerMediaType {
		t.Fatalf("chart manifest %s (%v), want a helm chart's config and one chart layer", raw, err)
	}
	if packed, err := chartpack.Pack(dir); err != nil || packed.Digest().String() != b.Digest {
		t.Fatalf("the build's digest is %s; the chart directory packs to %v (%v)", b.Digest, packed.Digest(), err)
	}
	// A Terraform module is packed as the terraform type reads it.
	mod := filepath.Join(t.TempDir(), "network")
	cluster.WriteApp(t, mod, map[string]string{"main.tf": "resource \"terraform_data\" \"n\" {}\n"})
	tb := printedBuild(t, c.cli.Run(0, "build", "package", mod, "--kind", "terraform", "--repo", "modules/network", "--wait", "-o", "json"))
	tr := repo(t, c.vendor.Host, "modules/network", c.mint(t, "repository:modules/network:pull"))
	td, err := tr.Resolve(ctx, tb.Digest)
	if err != nil {
		t.Fatal(err)
	}
	raw, err = content.FetchAll(ctx, tr, td)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil || m.ArtifactType != terraform.ModuleArtifactType || len(m.Layers) != 1 || m.Layers[0].MediaType != terraform.ModuleLayerMediaType {
		t.Fatalf("module artifact %s (%v), want the terraform type's artifact and layer types", raw, err)
	}

	later := time.Now().Add(time.Hour)
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error { return os.Chtimes(p, later, later) })
	again := printedBuild(t, c.cli.Run(0, "build", "package", dir, "--kind", "helm", "--repo", "charts/api", "--wait", "-o", "json"))
	if again.Digest != b.Digest || again.Id == b.Id {
		t.Fatalf("packaging again: %s (build %s), want the same digest %s in a new build", again.Digest, again.Id, b.Digest)
	}
}

// The example app that byoc app init writes names the demo image by
// digest: once the build agent synced the demo image (packed in Go, the
// same bytes everywhere), its web component deploys for real, through the
// vendor registry into the install's registry (the app trimmed to web:
// the other components need Terraform and Helm, tested elsewhere).
func TestCustodyExampleAppImage(t *testing.T) {
	skipShort(t)
	c := startCustody(t)
	layout := filepath.Join(c.layouts, "oci", "web")
	st, err := oci.NewWithContext(t.Context(), layout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demoimage.Write(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	b := printedBuild(t, c.cli.Run(0, "build", "sync", "oci:"+layout+":"+demoimage.Tag, "--repo", demoimage.Repository, "--wait", "-o", "json"))
	if b.Digest != demoimage.Digest().String() {
		t.Fatalf("demo image build %s, want %s", b.Digest, demoimage.Digest())
	}

	dir := t.TempDir()
	c.cli.Run(0, "app", "init", dir)
	web, err := os.ReadFile(filepath.Join(dir, "components", "web.toml"))
	if err != nil || !strings.Contains(string(web), `source = "acme/web@`+b.Digest+`"`) {
		t.Fatalf("byoc app init's web.toml does not name the demo build %s:\n%s", b.Digest, web)
	}
	for _, f := range []string{"components/api.toml", "components/cache.toml", "components/db.toml", "sandbox.toml", "actions/migrate.toml", "actions/healthz.toml"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	// web waits for api, which is gone here.
	if err := os.WriteFile(filepath.Join(dir, "components", "web.toml"), []byte(strings.Replace(string(web), `dependencies = ["api"]`, "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "installs", "demo.toml"), []byte(`inputs = { domain = "demo.acme.example", tier = "large" }`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := c.cli.Run(0, "app", "push", dir)
	stateDir := t.TempDir()
	cluster.StartAgent(t, c.ims.URL(), cluster.Pushed{Output: out}.EnrollToken(t), stateDir)
	if out := c.cli.Run(0, "install", "provision", "demo", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("provision:\n%s", out)
	}
	// The agent's default install registry: an OCI layout in its state dir.
	inst, err := oci.NewWithContext(t.Context(), filepath.Join(stateDir, "registry", "acme", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := inst.Exists(t.Context(), ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: demoimage.Digest(), Size: 397}); err != nil || !ok {
		t.Fatalf("the install registry lacks the demo image: %v %v", ok, err)
	}
	if out := c.cli.Run(0, "install", "images", "demo"); !strings.Contains(out, "vendor   acme/web@"+b.Digest) || !strings.Contains(out, "source   oci:"+layout+":1.0") {
		t.Fatalf("install images:\n%s", out)
	}
}
