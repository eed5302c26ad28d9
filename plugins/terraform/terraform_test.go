package terraform_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/proctest"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
	"github.com/byoc-dev/byoc/plugins/terraform"
	"github.com/byoc-dev/byoc/plugins/terraform/tfmodule"
)

// setup returns the environment the agent gives a terraform job: the
// provider mirror built by scripts/terraform-mirror.sh and an install
// registry (a fresh OCI layout root) holding the test modules. Without
// terraform or the mirror the test is skipped, saying how to get them;
// under CI=true it fails.
// zeroDigest is a well-formed digest of nothing pushed.
const zeroDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// modules are the test modules' references by digest, as setup pushed
// them (the same files always give the same digest).
var modules sync.Map

// moduleRef is the reference by digest of test module m; setup has run.
func moduleRef(m string) string {
	r, _ := modules.Load(m)
	return r.(string)
}

func setup(t *testing.T) (env map[string]string, registry string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs terraform: full tier only")
	}
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if _, err := exec.LookPath("terraform"); err != nil {
		missing("terraform is not on PATH (install Terraform 1.11, as .ci/run does)")
	}
	mirror := os.Getenv(terraform.EnvProviders)
	if mirror == "" {
		mirror = filepath.Join(repoRoot(t), ".cache", "terraform-mirror")
	}
	if _, err := os.Stat(filepath.Join(mirror, "registry.terraform.io", "hashicorp", "local")); err != nil {
		missing("no provider mirror at %s: run scripts/terraform-mirror.sh (or set $%s)", mirror, terraform.EnvProviders)
	}
	registry = t.TempDir()
	for _, m := range []string{"site", "slow"} {
		dg, err := terraform.PushModule(t.Context(), filepath.Join("testdata", m), "oci:"+registry, "modules/"+m+":1.0.0", ocicopy.Credentials{})
		if err != nil {
			t.Fatal(err)
		}
		modules.Store(m, "modules/"+m+"@"+dg)
	}
	return map[string]string{terraform.EnvProviders: mirror, terraform.EnvInstallRegistry: "oci:" + registry}, registry
}

func repoRoot(t *testing.T) string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && filepath.Base(filepath.Dir(filepath.Join(dir, "plugins"))) != "" {
			if b, _ := os.ReadFile(filepath.Join(dir, "go.mod")); strings.Contains(string(b), "module github.com/byoc-dev/byoc\n") {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no repository root above the test's directory")
		}
		dir = parent
	}
}

func expectNoLogText(secret string) sdktest.Check {
	return func(o *sdktest.Outcome) error {
		if strings.Contains(o.Log(), secret) {
			return fmt.Errorf("the log shows %q", secret)
		}
		b, _ := json.Marshal(o.Result.PlannedChanges)
		if strings.Contains(string(b), secret) {
			return fmt.Errorf("the planned changes show %q: %s", secret, b)
		}
		return nil
	}
}

func expectChange(address string, check func(sdk.PlannedChange) error) sdktest.Check {
	return func(o *sdktest.Outcome) error {
		for _, c := range o.Result.PlannedChanges {
			if c.Address == address {
				return check(c)
			}
		}
		return fmt.Errorf("no planned change of %s in %v", address, o.Result.PlannedChanges)
	}
}

func expectFile(path, content string) sdktest.Check {
	return func(*sdktest.Outcome) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(b) != content {
			return fmt.Errorf("%s holds %q, want %q", path, b, content)
		}
		return nil
	}
}

// TestLifecycle runs a module from the install registry through plan,
// apply, a plan without changes, drift after its file changed outside,
// the repairing apply, bad configs, and destroy, with real terraform and
// the mirrored local provider.
func TestLifecycle(t *testing.T) {
	env, _ := setup(t)
	site := t.TempDir()
	cfg := map[string]any{"module": moduleRef("site"), "vars": map[string]any{"name": "acme", "dir": site, "password": "s3cr3t-pw"}}
	index := filepath.Join(site, "index.html")
	sdktest.Test(t, terraform.New(), sdktest.Case{
		Env: env,
		Steps: []sdktest.Step{
			{Name: "plan", Op: sdk.OpPlan, Config: cfg, Check: sdktest.All(
				sdktest.ExpectChanges("Plan: 2 to add, 0 to change, 0 to destroy."),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "terraform_data.site"),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "local_file.index"),
				sdktest.ExpectLog("terraform: module "+moduleRef("site")+" ("),
				expectChange("terraform_data.site", func(c sdk.PlannedChange) error {
					in := c.After.(map[string]any)["input"].(map[string]any)
					if in["password"] != sdk.MaskedChanged || in["name"] != "acme" {
						return fmt.Errorf("after.input = %v: want the password masked and the name shown", in)
					}
					if c.After.(map[string]any)["id"] != terraform.Unknown {
						return fmt.Errorf("after.id = %v, want %q", c.After.(map[string]any)["id"], terraform.Unknown)
					}
					return nil
				}),
				expectNoLogText("s3cr3t-pw"),
				func(o *sdktest.Outcome) error {
					if _, err := os.Stat(index); err == nil {
						return errors.New("plan wrote the file")
					}
					return nil
				},
			)},
			{Name: "apply", Config: cfg, Check: sdktest.All(
				sdktest.ExpectOutput("url", "file://"+index),
				sdktest.ExpectOutput("name", "acme"),
				sdktest.ExpectOutput("meta", `{"files":1,"name":"acme"}`),
				sdktest.ExpectStateFile(terraform.StateFile),
				expectFile(index, "hello acme"),
				expectNoLogText("s3cr3t-pw"),
			)},
			{Name: "plan unchanged", Op: sdk.OpPlan, Config: cfg, Check: sdktest.ExpectChanges("No changes.")},
			{Name: "no drift", Op: sdk.OpDrift, Config: cfg, Check: sdktest.ExpectDrifted(false)},
			{Name: "drift", Op: sdk.OpDrift, Config: cfg,
				PreConfig: func() error { return os.WriteFile(index, []byte("defaced"), 0o644) },
				Check: sdktest.All(sdktest.ExpectDrifted(true),
					sdktest.ExpectPlannedChange(sdk.ActionDelete, "local_file.index"),
					sdktest.ExpectChanges("Drift: 1 object(s) changed outside byoc."),
					// A drift check changes nothing.
					expectFile(index, "defaced"),
				)},
			{Name: "repair", Config: cfg, Check: expectFile(index, "hello acme")},
			{Name: "update", Op: sdk.OpPlan, Config: map[string]any{"module": moduleRef("site"), "vars": map[string]any{"name": "acme2", "dir": site, "password": "s3cr3t-pw"}},
				Check: sdktest.All(
					sdktest.ExpectPlannedChange(sdk.ActionReplace, "local_file.index"),
					sdktest.ExpectPlannedChange(sdk.ActionUpdate, "terraform_data.site"),
					expectChange("terraform_data.site", func(c sdk.PlannedChange) error {
						if c.Summary != "change input, output" {
							return fmt.Errorf("summary %q", c.Summary)
						}
						in := c.After.(map[string]any)["input"].(map[string]any)
						if in["password"] != sdk.Masked {
							return fmt.Errorf("unchanged password shown as %v, want %q", in["password"], sdk.Masked)
						}
						return nil
					}),
				)},
			{Name: "undeclared variable", Op: sdk.OpPlan, Config: map[string]any{"module": moduleRef("site"), "vars": map[string]any{"name": "acme", "dir": site, "colour": "red"}},
				ExpectError: regexp.MustCompile(`config\.vars\.colour: the module declares no variable "colour" \(it declares: dir, name, password\)`)},
			{Name: "missing variable", Op: sdk.OpPlan, Config: map[string]any{"module": moduleRef("site"), "vars": map[string]any{"name": "acme"}},
				ExpectError: regexp.MustCompile(`No value for required variable`)},
			{Name: "unknown module", Op: sdk.OpPlan, Config: map[string]any{"module": "modules/nope@" + zeroDigest},
				ExpectError: regexp.MustCompile(`module "modules/nope@sha256:0+": no OCI image layout at .*modules/nope`)},
			{Name: "unknown digest", Op: sdk.OpPlan, Config: map[string]any{"module": "modules/site@" + zeroDigest},
				ExpectError: regexp.MustCompile(`module "modules/site@sha256:0+": resolve sha256:0+ in .*modules/site: .*not found`)},
			{Config: map[string]any{"vars": map[string]any{"9lives": 1, "byoc_data_dir": "/x"}}, ExpectDiagnostics: []string{
				"module: is required", "vars.9lives: is not a Terraform variable name", "vars.byoc_data_dir: byoc_ variables are set by the agent"}},
			{Config: map[string]any{"module": "Modules/Site", "module_dir": "rel"}, ExpectDiagnostics: []string{"module_dir: set module or module_dir, not both"}},
			{Config: map[string]any{"module": "modules/site@sha256:abc"}, ExpectDiagnostics: []string{"module: digest"}},
			// A tag can move under the install: refused, with how to get the digest.
			{Config: map[string]any{"module": "modules/site:1.0.0"}, ExpectDiagnostics: []string{
				"module: names the mutable tag \"1.0.0\"; reference the module by digest, modules/site@sha256:HEX (`agentd module push DIR modules/site:1.0.0` prints the digest"}},
			{Config: map[string]any{"module": "modules/site"}, ExpectDiagnostics: []string{"module: names the mutable tag \"latest\""}},
			{Config: map[string]any{"module_dir": "rel"}, ExpectDiagnostics: []string{"module_dir: must be an absolute path"}},
			{Config: map[string]any{"module": "m@" + zeroDigest, "backend": map[string]any{"s3": map[string]any{"bucket": "b"}}}, ExpectDiagnostics: []string{
				"backend.s3.key: is required", "backend.s3.region: is required"}},
			{Config: map[string]any{"module": "m@" + zeroDigest, "varz": map[string]any{}}, ExpectDiagnostics: []string{"varz: unknown field"}},
		},
		CheckDestroy: sdktest.All(sdktest.ExpectNoStateFile(terraform.StateFile), func(*sdktest.Outcome) error {
			if _, err := os.Stat(index); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("after destroy %s: %v, want it gone", index, err)
			}
			return nil
		}),
	})
}

// TestModuleDir runs a module from a directory on the agent (development)
// and hands one component's outputs to the next one's variables, as imsd
// does with {{ .components.NAME.outputs.KEY }}.
func TestModuleDir(t *testing.T) {
	env, _ := setup(t)
	dir := t.TempDir()
	abs, _ := filepath.Abs(filepath.Join("testdata", "site"))
	var url string
	sdktest.Test(t, terraform.New(), sdktest.Case{Env: env, Component: "upstream", SkipDestroy: true, Steps: []sdktest.Step{
		{Config: map[string]any{"module_dir": abs, "vars": map[string]any{"name": "up", "dir": dir}}, Check: sdktest.All(
			sdktest.ExpectLog("terraform: module from directory "+abs+" (development)"),
			func(o *sdktest.Outcome) error { url = o.Result.Outputs["url"]; return nil },
		)},
	}})
	if want := "file://" + filepath.Join(dir, "index.html"); url != want {
		t.Fatalf("upstream url = %q, want %q", url, want)
	}
	down := t.TempDir()
	sdktest.Test(t, terraform.New(), sdktest.Case{Env: env, Component: "downstream", Steps: []sdktest.Step{
		{Config: map[string]any{"module": moduleRef("site"), "vars": map[string]any{"name": url, "dir": down}}, Check: sdktest.All(
			sdktest.ExpectOutput("name", url),
			expectFile(filepath.Join(down, "index.html"), "hello "+url),
		)},
	}})
}

// logger collects an operation's log lines and says when one matches.
type logger struct {
	mu    sync.Mutex
	lines []string
	want  *regexp.Regexp
	seen  chan struct{}
	once  sync.Once
}

func newLogger(want string) *logger {
	return &logger{want: regexp.MustCompile(want), seen: make(chan struct{})}
}

func (l *logger) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
	if l.want.MatchString(s) {
		l.once.Do(func() { close(l.seen) })
	}
}
func (l *logger) Stdout(s string) { l.add(s) }
func (l *logger) Stderr(s string) { l.add(s) }
func (l *logger) System(s string) { l.add(s) }
func (l *logger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// stateResources lists the resources in a local state file.
func stateResources(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Resources []struct{ Type, Name string }
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, r := range st.Resources {
		out = append(out, r.Type+"."+r.Name)
	}
	return out
}

// TestCancelMidApply cancels an apply while Terraform waits in the middle
// of it: Terraform is interrupted, saves what it did and releases the
// lock; the next apply continues from that state and finishes.
func TestCancelMidApply(t *testing.T) {
	env, _ := setup(t)
	p := terraform.New()
	state := t.TempDir()
	job := func(n int) sdk.JobContext {
		return sdk.JobContext{JobID: fmt.Sprintf("job-%d", n), InstallID: "i", Attempt: 1, WorkDir: t.TempDir(), StateDir: state}
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	log := newLogger(`time_sleep\.wait: Creating`)
	type result struct {
		resp *sdk.ApplyResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		r, err := p.Apply(ctx, &sdk.ApplyRequest{Job: job(1), Config: map[string]any{"module": moduleRef("slow"), "vars": map[string]any{"wait": "120s"}}, Env: env, Log: log})
		done <- result{r, err}
	}()
	select {
	case <-log.seen:
	case r := <-done:
		t.Fatalf("apply ended before the sleep began: %v\n%s", r.err, log.text())
	case <-time.After(2 * time.Minute):
		t.Fatalf("the sleep never began:\n%s", log.text())
	}
	// Terraform logs "Creating..." just before it calls the provider; an
	// interrupt in between stops the provider's earlier calls only, and
	// the sleep would run its full length. No signal says the call has
	// begun, so give it a moment.
	time.Sleep(2 * time.Second)
	started := time.Now()
	cancel(errors.New("cancelled by the test"))
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("apply still running a minute after the cancel:\n%s", log.text())
	}
	t.Logf("apply returned %s after the cancel", time.Since(started).Round(time.Millisecond))
	if r.err == nil || !strings.Contains(r.err.Error(), "terraform apply interrupted (cancelled by the test)") {
		t.Fatalf("apply error = %v, want the interruption\n%s", r.err, log.text())
	}
	if !strings.Contains(log.text(), "Interrupt received") {
		t.Errorf("terraform was not interrupted:\n%s", log.text())
	}
	if got := stateResources(t, filepath.Join(state, terraform.StateFile)); strings.Join(got, ",") != "terraform_data.first" {
		t.Errorf("state after the cancel holds %v, want terraform_data.first only", got)
	}
	if _, err := os.Stat(filepath.Join(state, terraform.StateFile+".lock.info")); err == nil {
		t.Error("the state lock's info file is still there")
	}

	log = newLogger(`^$`)
	resp, err := p.Apply(t.Context(), &sdk.ApplyRequest{Job: job(2), Config: map[string]any{"module": moduleRef("slow"), "vars": map[string]any{"wait": "1s"}}, Env: env, Log: log})
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, log.text())
	}
	if resp.Outputs["done"] != "last" {
		t.Errorf("rerun outputs %v", resp.Outputs)
	}
	if !strings.Contains(log.text(), "Plan: 2 to add") {
		t.Errorf("rerun did not continue from the saved state (want 2 to add, first kept):\n%s", log.text())
	}
	if got := stateResources(t, filepath.Join(state, terraform.StateFile)); len(got) != 3 {
		t.Errorf("state after the rerun holds %v", got)
	}
}

// TestModuleFromRegistry reads the module from an install registry that
// is a registry server (docker-registry with Basic auth, started by the
// test), by digest, with the credentials the agent hands every operation.
func TestModuleFromRegistry(t *testing.T) {
	env, _ := setup(t)
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{Username: "agent", Password: "registry-pw"})
	creds := ocicopy.Credentials{Username: "agent", Password: "registry-pw"}
	dg, err := terraform.PushModule(t.Context(), filepath.Join("testdata", "site"), reg.Host, "modules/site:1.0.0", creds)
	if err != nil {
		t.Fatal(err)
	}
	layoutDigest, err := terraform.PushModule(t.Context(), filepath.Join("testdata", "site"), "oci:"+t.TempDir(), "modules/site:1.0.0", ocicopy.Credentials{})
	if err != nil || layoutDigest != dg {
		t.Fatalf("the same module pushed to a layout: %s, %v; want the registry's digest %s", layoutDigest, err, dg)
	}
	env[terraform.EnvInstallRegistry] = reg.Host
	site := t.TempDir()
	cfg := map[string]any{"module": "modules/site@" + dg, "vars": map[string]any{"name": "acme", "dir": site}}
	sdktest.Test(t, terraform.New(), sdktest.Case{Env: env, SkipDestroy: true, Steps: []sdktest.Step{
		{Name: "no credentials", Op: sdk.OpPlan, Config: cfg, ExpectError: regexp.MustCompile(`module "modules/site@sha256:[0-9a-f]{64}": resolve .*basic credential not found`)},
		{Name: "plan", Op: sdk.OpPlan, Config: cfg,
			Env: map[string]string{terraform.EnvInstallRegistry + "_USERNAME": "agent", terraform.EnvInstallRegistry + "_PASSWORD": "registry-pw"},
			Check: sdktest.All(
				sdktest.ExpectLog("terraform: module modules/site@"+dg+" ("+dg+")"),
				sdktest.ExpectChanges("Plan: 2 to add"),
			)},
	}})
}

// terraformChild returns the pid of a terraform process this test process
// started, or 0.
func terraformChild(t *testing.T) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.HasSuffix(s[:i], " (terraform") {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			return pid
		}
	}
	return 0
}

// TestKilledApplyRerun kills Terraform outright (SIGKILL, no chance to
// stop) in the middle of an apply: the next apply of the component says
// that the previous run did not finish and continues from the state on
// disk (the local lock died with the process) to the end.
func TestKilledApplyRerun(t *testing.T) {
	env, _ := setup(t)
	// Nothing the test starts outlives it: a provider whose terraform
	// was killed comes back to the test binary, and is found.
	proctest.NothingLeft(t)
	p := terraform.New()
	state := t.TempDir()
	job := func(n int) sdk.JobContext {
		return sdk.JobContext{JobID: fmt.Sprintf("job-%d", n), InstallID: "i", Attempt: 1, WorkDir: t.TempDir(), StateDir: state}
	}
	log := newLogger(`time_sleep\.wait: Creating`)
	done := make(chan error, 1)
	go func() {
		_, err := p.Apply(t.Context(), &sdk.ApplyRequest{Job: job(1), Config: map[string]any{"module": moduleRef("slow"), "vars": map[string]any{"wait": "120s"}}, Env: env, Log: log})
		done <- err
	}()
	select {
	case <-log.seen:
	case err := <-done:
		t.Fatalf("apply ended before the sleep began: %v\n%s", err, log.text())
	case <-time.After(2 * time.Minute):
		t.Fatalf("the sleep never began:\n%s", log.text())
	}
	pid := terraformChild(t)
	if pid == 0 {
		t.Fatal("no terraform process found")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "signal: killed") {
			t.Fatalf("apply of a killed terraform: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("apply still running a minute after terraform was killed")
	}
	// terraform-exec ran terraform in a process group of its own (its
	// pid), its providers with it: they outlive a terraform killed
	// outright. In agentd they end with the plugin, whose session's
	// groups the plugin host kills; here the test ends them.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, ".terraform-running")); err != nil {
		t.Fatalf("the killed run left no running marker: %v", err)
	}

	log = newLogger(`^$`)
	resp, err := p.Apply(t.Context(), &sdk.ApplyRequest{Job: job(2), Config: map[string]any{"module": moduleRef("slow"), "vars": map[string]any{"wait": "1s"}}, Env: env, Log: log})
	if err != nil {
		t.Fatalf("rerun after the kill: %v\n%s", err, log.text())
	}
	if resp.Outputs["done"] != "last" || !strings.Contains(log.text(), "the previous run of this component (job job-1) did not finish") {
		t.Errorf("rerun outputs %v, log:\n%s", resp.Outputs, log.text())
	}
	if got := stateResources(t, filepath.Join(state, terraform.StateFile)); len(got) != 3 {
		t.Errorf("state after the rerun holds %v", got)
	}
}

// TestHostileModuleLayer runs, with real terraform, module layers a
// hostile packer made by hand (not by PushModule, which refuses them):
// each is refused before terraform runs, naming the entry and the limit
// or rule, where before each planned.
func TestHostileModuleLayer(t *testing.T) {
	env, registry := setup(t)
	main := `resource "terraform_data" "x" {}` + "\n"
	elsewhere := filepath.Join(t.TempDir(), "stolen.tfstate")
	many := []tarEntry{{"main.tf", main}}
	for i := range tfmodule.MaxEntries {
		many = append(many, tarEntry{fmt.Sprintf("empty/%05d", i), ""})
	}
	for _, tc := range []struct {
		name    string
		entries []tarEntry
		want    string
	}{
		{"many empty files", many, `entry "empty/09999": the module has more than 10000 entries`},
		{"pre-seeded providers", []tarEntry{{"main.tf", main},
			{".terraform/providers/registry.terraform.io/hashicorp/local/1.4.0/linux_amd64/terraform-provider-local_v1.4.0", "#!/bin/sh\n"}},
			`entry "\.terraform/providers/registry\.terraform\.io/hashicorp/local/1\.4\.0/linux_amd64/terraform-provider-local_v1\.4\.0": \.terraform/ is Terraform's working directory`},
		{"backend override", []tarEntry{{"main.tf", main},
			{"zzz_override.tf", fmt.Sprintf("terraform {\n  backend \"local\" {\n    path = %q\n  }\n}\n", elsewhere)}},
			`entry "zzz_override\.tf": override files are refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dg, err := tfmodule.PushLayer(t.Context(), tarEntries(t, tc.entries), "oci:"+registry, "modules/hostile:1", ocicopy.Credentials{})
			if err != nil {
				t.Fatal(err)
			}
			sdktest.Test(t, terraform.New(), sdktest.Case{Env: env, SkipDestroy: true, Steps: []sdktest.Step{
				{Name: "plan", Op: sdk.OpPlan, Config: map[string]any{"module": "modules/hostile@" + dg},
					ExpectError: regexp.MustCompile(`module "modules/hostile@` + dg + `": layer sha256:[0-9a-f]{64}: ` + tc.want)},
			}})
			if _, err := os.Stat(elsewhere); err == nil {
				t.Fatal("the override's backend was used")
			}
		})
	}
}

type tarEntry struct{ name, body string }

// tarEntries is a gzipped tar of regular files.
func tarEntries(t *testing.T, entries []tarEntry) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}
