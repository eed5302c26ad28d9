package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// hostileModule is a Terraform module of the kind the sandbox exists
// for: a local-exec provisioner runs whatever the vendor wrote on the
// agent's machine, starting from the component's data directory.
const hostileModule = `variable "byoc_data_dir" {
  type = string
}

variable "probe" {
  type = string
}

resource "terraform_data" "probe" {
  provisioner "local-exec" {
    command     = var.probe
    environment = { DATA = var.byoc_data_dir }
  }
}
`

// probeScript is what the hostile code runs: for each path of the
// agent's (its identity, the customer's controls, its audit copy,
// another component's state, the secrets file, another job's workspace,
// other plugins' socket dirs) it says REACHED with what it got, or
// ABSENT with the error; it tries to write the control files, and
// counts the plugin socket dirs and job workspaces it can see.
func probeScript(state, secrets string, more ...string) string {
	paths := []string{
		filepath.Join(state, "identity.json"),
		filepath.Join(state, "permissions.json"),
		filepath.Join(state, "breakglass.json"),
		filepath.Join(state, "seen-jobs"),
		filepath.Join(state, "audit"),
		filepath.Join(state, "logs"),
		filepath.Join(state, "components", "victim"),
		filepath.Join(state, "components", "victim", "secret"),
		secrets,
	}
	paths = append(paths, more...)
	var b strings.Builder
	b.WriteString(`probe() { for p in "$@"; do if [ -e "$p" ]; then echo "REACHED $p: $(head -c 80 "$p" 2>/dev/null || ls "$p" 2>&1)"; else echo "ABSENT $p ($(ls "$p" 2>&1))"; fi; done; }` + "\n")
	b.WriteString("probe")
	for _, p := range paths {
		fmt.Fprintf(&b, " '%s'", p)
	}
	b.WriteString("\n")
	for _, f := range []string{"permissions.json", "breakglass.json", "identity.json"} {
		p := filepath.Join(state, f)
		fmt.Fprintf(&b, `if (echo '{"pwned":true}' > '%[1]s') 2>/dev/null; then echo "WROTE %[1]s"; else echo "NOWRITE %[1]s ($( (echo x > '%[1]s') 2>&1))"; fi`+"\n", p)
	}
	fmt.Fprintf(&b, `echo "SOCKDIRS $(ls -d '%s'/byoc-plugin-* 2>/dev/null | wc -l)"`+"\n", os.TempDir())
	fmt.Fprintf(&b, `echo "JOBS $(ls '%s' 2>/dev/null | wc -l)"`+"\n", filepath.Join(state, "jobs"))
	fmt.Fprintf(&b, `echo "COMPONENTS $(ls '%s' 2>&1 | tr '\n' ' ')"`+"\n", filepath.Join(state, "components"))
	b.WriteString(`[ -n "$DATA" ] && echo "WALKUP $(ls -a "$DATA/../.." 2>&1 | tr '\n' ' ')"` + "\n")
	b.WriteString("echo PROBES DONE\n")
	return b.String()
}

// netProbe is what hostile code runs against the network: a service on
// the host's loopback at addr (standing for the instance metadata
// service and the agent's local services), directly and through the
// sandbox's proxy, and the metadata service itself through the proxy.
// Each line says what it got.
func netProbe(addr string) string {
	return fmt.Sprintf(`echo "NET direct $(curl -sS -m 10 --noproxy '*' http://%[1]s/ 2>&1 || echo UNREACHABLE)"
echo "NET via-proxy $(env -u NO_PROXY -u no_proxy curl -sS -m 10 -x "$HTTP_PROXY" http://%[1]s/ 2>&1)"
echo "NET metadata $(curl -sS -m 10 http://169.254.169.254/latest/meta-data/iam/security-credentials/ 2>&1)"
`, addr)
}

// imdsStandIn serves, on the host's loopback, what vendor code must
// never get; it counts the requests it answered.
func imdsStandIn(t *testing.T) (string, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, "IMDS-ROLE-CREDENTIALS")
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), &n
}

// Vendor code of every kind the agent runs (a Terraform module's
// local-exec, an action step, a third-party plugin binary and the shell
// it starts) tries to read the agent's identity, write the customer's
// permission and break-glass files, read the secrets file and another
// component's state, and find another job's workspace and other
// plugins' sockets. With bubblewrap, and with the agent's own namespace
// sandbox, every one of those paths is absent, nothing of the agent's
// changes, and the job log holds nothing of the secrets.
func TestHostileVendorCode(t *testing.T) {
	skipShort(t)
	mirror := terraformMirror(t)
	for _, mode := range []string{"bubblewrap", "namespaces"} {
		t.Run(mode, func(t *testing.T) { hostileVendorCode(t, mode, mirror) })
	}
}

func hostileVendorCode(t *testing.T, mode, mirror string) {
	if mode == "bubblewrap" {
		if _, err := exec.LookPath("bwrap"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("bubblewrap is not installed (.ci/run installs it)")
			}
			t.Skip("bubblewrap is not installed")
		}
	}
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	agentd := filepath.Join(cluster.Binaries(t), "agentd")

	// Not under /tmp: a plugin's /tmp is a private tmpfs of its own, and
	// an agent's state lives elsewhere (/var/lib/byoc, say).
	root, err := os.MkdirTemp("/var/tmp", "byoc-hostile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	stateDir := filepath.Join(root, "agent")
	secretValue := "hostile-test-secret-" + hex.EncodeToString([]byte(mode))
	victimValue := "victim-state-" + mode
	secrets := filepath.Join(root, "secrets.env")
	if err := os.WriteFile(secrets, []byte("SOME_TOKEN="+secretValue+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(stateDir, "components", "victim")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte(victimValue), 0o600); err != nil {
		t.Fatal(err)
	}

	// The module goes into the agent's install registry, as a sync would
	// put it there.
	modDir := filepath.Join(root, "module")
	if err := os.Mkdir(modDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modDir, "main.tf"), []byte(hostileModule), 0o644); err != nil {
		t.Fatal(err)
	}
	var out []byte
	out, err = exec.Command(agentd, "module", "push", "--state-dir", stateDir, modDir, "modules/hostile:0.1.0").CombinedOutput()
	dg := regexp.MustCompile(`(sha256:[0-9a-f]{64})`).FindSubmatch(out)
	if err != nil || dg == nil {
		t.Fatalf("agentd module push: %v\n%s", err, out)
	}
	imds, imdsHits := imdsStandIn(t)
	probe := probeScript(stateDir, secrets) + netProbe(imds)
	token := cli.PushApp(map[string]string{
		"app.toml": "name = \"hostile\"\n",
		"components/tf.toml": `type = "terraform"
[config]
module = "modules/hostile@` + string(dg[1]) + `"
vars = { probe = ` + tomlString(probe) + ` }
`,
		"installs/acme.toml": "",
	}).EnrollToken(t)

	// The third-party plugin, pinned.
	plugins := filepath.Join(root, "plugins")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(plugins, "byoc-plugin-hostile")
	build := exec.Command("go", "build", "-o", bin, "./testdata/hostileplugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the hostile plugin: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)

	cluster.StartAgent(t, ims.URL(), token, stateDir, "--sandbox", mode, "--secrets-file", secrets,
		"--terraform-providers", mirror, "--plugin-dir", plugins, "--plugin-pin", "hostile="+hex.EncodeToString(sum[:]))
	waitConnected(t, ims, "acme")
	identity := filepath.Join(stateDir, "identity.json")
	before, err := os.ReadFile(identity)
	if err != nil {
		t.Fatalf("the agent's identity: %v", err)
	}
	c := ims.Admin()
	ctx := context.Background()

	// A job that holds its plugin, its socket and its workspace while the
	// hostile code looks for them.
	hold := enqueue(t, c, "acme", "echo holding; sleep 300", 600)
	var holderWork string
	cluster.Eventually(t, 30*time.Second, "the holding job's workspace", func() bool {
		holderWork = filepath.Join(stateDir, "jobs", hold.Id+"-1")
		_, err := os.Stat(holderWork)
		return err == nil
	})
	// The holder's plugin socket, which its plugin creates once it runs.
	var hostSockDirs, hostSocks []string
	cluster.Eventually(t, 30*time.Second, "the holding job's plugin socket", func() bool {
		hostSockDirs, _ = filepath.Glob(filepath.Join(os.TempDir(), "byoc-plugin-*"))
		hostSocks = nil
		for _, d := range hostSockDirs {
			s, _ := filepath.Glob(filepath.Join(d, "plugin*"))
			hostSocks = append(hostSocks, s...)
		}
		return len(hostSocks) > 0
	})
	more := append(append([]string{holderWork}, hostSockDirs...), hostSocks...)

	logsOf := func(id string) string {
		var lines []string
		for _, l := range cluster.Logs(t, c, id) {
			lines = append(lines, l.Text)
		}
		return strings.Join(lines, "\n")
	}
	var checkFiles func(t *testing.T, who, log string, withMore bool)
	check := func(t *testing.T, who, log string, withMore bool) {
		t.Helper()
		checkFiles(t, who, log, withMore)
		if strings.Contains(log, "IMDS-ROLE-CREDENTIALS") || imdsHits.Load() != 0 {
			t.Errorf("%s reached the host's loopback service (%d requests):\n%s", who, imdsHits.Load(), log)
		}
		if !strings.Contains(log, "NET direct curl: (7) Failed to connect to 127.0.0.1") {
			t.Errorf("%s: the direct connection to the host's loopback did not fail to connect:\n%s", who, log)
		}
		if who == "action step" {
			return // a step without network has no proxy either
		}
		for _, w := range []string{"NET via-proxy byoc egress proxy: connection to " + imds + " refused by the sandbox's egress policy (always denied: loopback (127.0.0.0/8))",
			"NET metadata byoc egress proxy: connection to 169.254.169.254:80 refused by the sandbox's egress policy (always denied: instance metadata service (169.254.169.254))",
			"[agentd] egress: connection refused: " + imds + ": always denied: loopback (127.0.0.0/8)",
			"[agentd] egress: 2 connections refused"} {
			if !strings.Contains(log, w) {
				t.Errorf("%s: the log lacks %q:\n%s", who, w, log)
			}
		}
	}
	checkFiles = func(t *testing.T, who, log string, withMore bool) {
		t.Helper()
		if !strings.Contains(log, "PROBES DONE") {
			t.Fatalf("%s: the probes did not run:\n%s", who, log)
		}
		// Terraform echoes the command it runs; what counts is what the
		// command printed.
		var said []string
		for _, l := range strings.Split(log, "\n") {
			if !strings.Contains(l, "Executing: ") {
				said = append(said, l)
			}
		}
		log = strings.Join(said, "\n")
		if !regexp.MustCompile(`SOCKDIRS [01]\n`).MatchString(log) {
			t.Errorf("%s: sees other plugins' socket dirs (it may see its own):\n%s", who, log)
		}
		for _, bad := range []string{"REACHED", "WROTE", secretValue, victimValue, "plugin READ", "plugin LISTED", "DIALED"} {
			if strings.Contains(log, bad) {
				t.Errorf("%s: the log has %q:\n%s", who, bad, log)
			}
		}
		want := []string{
			"ABSENT " + identity + " (ls: cannot access '" + identity + "': No such file or directory)",
			"ABSENT " + secrets + " (ls: cannot access '" + secrets + "': No such file or directory)",
			"ABSENT " + victim + " (ls: cannot access '" + victim + "': No such file or directory)",
			"NOWRITE " + filepath.Join(stateDir, "permissions.json"),
			"NOWRITE " + filepath.Join(stateDir, "breakglass.json"),
			"JOBS 1", // its own
		}
		if withMore {
			want = append(want, "ABSENT "+holderWork)
			for _, d := range hostSockDirs {
				want = append(want, "ABSENT "+d)
			}
		}
		for _, w := range want {
			if !strings.Contains(log, w) {
				t.Errorf("%s: the log lacks %q:\n%s", who, w, log)
			}
		}
	}

	t.Run("action step", func(t *testing.T) {
		job := enqueue(t, c, "acme", probeScript(stateDir, secrets, more...)+netProbe(imds), 120)
		_, end := follow(t, c, job.Id)
		if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job ended %v: %s", end.State, end.Error)
		}
		check(t, "action step", logsOf(job.Id), true)
	})

	t.Run("third-party plugin", func(t *testing.T) {
		var paths []any
		for _, p := range append([]string{identity, filepath.Join(stateDir, "permissions.json"), secrets, filepath.Join(victim, "secret")}, more...) {
			paths = append(paths, p)
		}
		var socks []any
		for _, p := range hostSocks {
			socks = append(socks, p)
		}
		cfg, err := structpb.NewStruct(map[string]any{
			"paths":   paths,
			"write":   []any{filepath.Join(stateDir, "permissions.json"), filepath.Join(stateDir, "breakglass.json")},
			"sockets": socks,
			"script":  probeScript(stateDir, secrets, more...) + netProbe(imds),
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "acme", ComponentType: "hostile", Operation: "apply", Config: cfg}))
		if err != nil {
			t.Fatal(err)
		}
		_, end := follow(t, c, r.Msg.Job.Id)
		if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job ended %v: %s", end.State, end.Error)
		}
		log := logsOf(r.Msg.Job.Id)
		check(t, "third-party plugin", log, true)
		for _, w := range []string{"plugin read " + identity + ": open " + identity + ": no such file or directory",
			"plugin write " + filepath.Join(stateDir, "permissions.json") + ": open " + filepath.Join(stateDir, "permissions.json") + ": read-only file system"} {
			if !strings.Contains(log, w) {
				t.Errorf("the log lacks %q:\n%s", w, log)
			}
		}
		if !strings.Contains(log, "plugin dial "+hostSocks[0]+": dial unix "+hostSocks[0]+": connect: no such file or directory") {
			t.Errorf("no refused dial of another plugin's socket %v in the log:\n%s", socks, log)
		}
	})

	t.Run("terraform local-exec", func(t *testing.T) {
		if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
			t.Fatalf("provision:\n%s", out)
		}
		wfs, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		log := logsOf(jobOf(t, c, wfs.Msg.Workflows[0].Id, "tf"))
		check(t, "terraform local-exec", log, false)
		// Walking up from its data directory, the module finds its own
		// component's directory and nothing else.
		if !regexp.MustCompile(`(?m)WALKUP \. \.\. tf ?$`).MatchString(log) {
			t.Errorf("walking up from byoc_data_dir found more than its own directory:\n%s", log)
		}
	})

	if _, err := c.CancelJob(ctx, connect.NewRequest(&imsv1.CancelJobRequest{Id: hold.Id, Reason: "the probes are done"})); err != nil {
		t.Fatal(err)
	}
	// The agent's own journal has one summary per job whose connections
	// were refused, naming the destination and the rule.
	journal, err := os.ReadFile(filepath.Join(stateDir, "audit", "agent.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(journal, []byte(`"egress.refused"`)); n < 2 || !bytes.Contains(journal, []byte(imds+": always denied: loopback")) {
		t.Errorf("the agent's journal has %d egress.refused records, or none naming %s:\n%s", n, imds, journal)
	}
	after, err := os.ReadFile(identity)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("the agent's identity changed or vanished: %v", err)
	}
	for _, f := range []string{"permissions.json", "breakglass.json"} {
		if b, err := os.ReadFile(filepath.Join(stateDir, f)); err == nil && bytes.Contains(b, []byte("pwned")) {
			t.Errorf("%s was written by vendor code: %s", f, b)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(victim, "secret")); string(b) != victimValue {
		t.Errorf("the other component's state changed: %q", b)
	}
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Without a sandbox it can build, agentd refuses to start, saying why
// and naming the flag; with --insecure-no-sandbox it starts and says
// loudly that vendor code runs unsandboxed.
func TestAgentRefusesToRunWithoutSandbox(t *testing.T) {
	skipShort(t)
	agentd := filepath.Join(cluster.Binaries(t), "agentd")
	cmd := exec.Command(agentd, "--ims", "http://127.0.0.1:1", "--state-dir", t.TempDir(), "--sandbox", "bubblewrap")
	cmd.Env = []string{"PATH=/nonexistent", "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 ||
		!strings.Contains(string(out), "no sandbox for vendor code can be built here: bubblewrap (bwrap) is not installed") ||
		!strings.Contains(string(out), "--insecure-no-sandbox") {
		t.Fatalf("agentd without bubblewrap: exit %d, %v:\n%s", code, err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd = exec.CommandContext(ctx, agentd, "--ims", "http://127.0.0.1:1", "--state-dir", t.TempDir(), "--sandbox", "bubblewrap", "--insecure-no-sandbox")
	cmd.Env = []string{"PATH=/nonexistent", "HOME=" + t.TempDir()}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte("WARNING: --insecure-no-sandbox")) {
		n, err := stderr.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("agentd --insecure-no-sandbox did not warn: %v:\n%s", err, got)
		}
	}
}
