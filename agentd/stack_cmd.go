package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/agentd/preflight"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/supportbundle"
	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/internal/flaghelp"
	"github.com/byoc-dev/byoc/plugins/bundle"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// stackCredentials gives each job its permission mode's role's
// credentials (agent.PluginRunner.Credentials), bounded by the job's
// time limit. A break-glass job takes its live grant's role when the
// stack has it (else the mode's role), only while a grant is live and no
// longer than it: without one, no role is assumed.
func stackCredentials(st *stack.Stack, stateDir string, now func() time.Time) func(context.Context, agent.Job) (map[string]string, []string, error) {
	return func(ctx context.Context, job agent.Job) (map[string]string, []string, error) {
		var role string
		var until time.Time
		if job.Mode == string(permissions.BreakGlass) {
			gs, err := permissions.LoadGrants(stateDir)
			if err != nil {
				return nil, nil, fmt.Errorf("break-glass grants: %w", err)
			}
			t := now()
			g, ok := gs.Live(t)
			if job.Grant != "" {
				// The job's own grant (a support session's allows
				// sessions): never another live one's role or end.
				if why := gs.Ended(job.Grant, t); why != "" {
					return nil, nil, &stack.NoGrantError{State: why}
				}
				gp, _ := gs.Find(job.Grant)
				g, ok = *gp, true
			}
			if !ok {
				// Never the break-glass role without a live grant:
				// not the mode's own role either.
				bg := permissions.Default()
				bg.Set(permissions.BreakGlass, true)
				return nil, nil, &stack.NoGrantError{State: bg.RefusalAt(job.Mode, gs, t)}
			}
			role, until = g.Role, g.ExpiresAt
		}
		c, err := st.Assume(ctx, job.Mode, role, job.ID, job.Timeout, until)
		if err != nil {
			return nil, nil, err
		}
		return c.Env, c.Secret, nil
	}
}

// stackReport is what the hello tells imsd of the stack (nil: none).
func stackReport(st *stack.Stack, v stack.Values) *agentv1.StackReport {
	if st == nil {
		return nil
	}
	return &agentv1.StackReport{Format: st.Config.Format, Stack: st.Config.Stack, Inputs: v.Report, Outputs: st.Config.Outputs}
}

// enrolled reports whether the state dir holds an identity.
func enrolled(stateDir string) bool {
	_, err := os.Stat(filepath.Join(stateDir, identity.FileName))
	return err == nil
}

const preflightUsage = `usage: agentd preflight [--stack-config FILE] [--state-dir DIR] [--ims URL]
                        [--bundled-plugins PATH] [--role install|build]
                        [--kubeconfig FILE] [--install-registry LOCATION]
                        [--sandbox MODE] [--insecure-no-sandbox]
                        [--sandbox-network proxy|none|host] [--sandbox-egress-* ...]

Checks what the install's agent needs: egress to imsd, the clock against
imsd's, each enabled permission mode's role assumable (an STS AssumeRole
per role), the customer's inputs and secrets readable, the install's
registry reachable, byoc-plugins (the built-in types too heavy for
agentd's own process) beside agentd and safe to run, the Kubernetes API
server (GET /version, through byoc-plugins as a helm job reaches it) when
the app has helm components or a kubeconfig is given, the vendor code
sandbox and its network (give the same sandbox flags as the agent), and
free disk space in the state dir. Prints a table
with a fix for each failure; exits 1 if any check failed. The install
stack runs it before the agent enrols.
`

func preflightCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentd preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), preflightUsage) }
	stackPath := fs.String("stack-config", os.Getenv("BYOC_STACK_CONFIG"), "the install stack's config `file`")
	stateDir := fs.String("state-dir", "", "the agent's state `directory`")
	ims := fs.String("ims", os.Getenv("BYOC_IMS_URL"), "imsd `URL` (default: the stack's)")
	bundledFlag := fs.String("bundled-plugins", os.Getenv(bundledEnv), "`path` of "+bundle.Binary+" (default: beside agentd)")
	role := fs.String("role", "install", "the agent's `role` (install or build: the build agent needs no "+bundle.Binary+")")
	sandboxMode := fs.String("sandbox", os.Getenv(sandboxEnv), "the sandbox `mode` the agent runs with: auto, bubblewrap or namespaces")
	insecure := fs.Bool("insecure-no-sandbox", false, "the agent runs with --insecure-no-sandbox")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "`file`: the kubeconfig agentd is given (also $KUBECONFIG)")
	installRegistry := fs.String("install-registry", os.Getenv("BYOC_INSTALL_REGISTRY"), "the install registry `location` agentd is given")
	var egressOpts egressFlags
	egressOpts.register(fs)
	if code, done := flaghelp.Parse(fs, args, stdout); done {
		return code
	}
	bundled, err := bundledLoader(*bundledFlag, *role)
	if err != nil {
		fmt.Fprintf(stderr, "agentd preflight: %v\n", err)
		return 2
	}
	var st *stack.Stack
	if *stackPath != "" {
		var err error
		if st, err = stack.Open(*stackPath); err != nil {
			fmt.Fprintf(stderr, "agentd preflight: %v\n", err)
			return 2
		}
	}
	o := preflight.Options{Stack: st, IMS: *ims, StateDir: *stateDir, Enrolled: *stateDir != "" && enrolled(*stateDir)}
	if len(bundled.Bundled) > 0 {
		o.Bundled, o.BundledPath = bundled.CheckBundled, bundled.BundledExe
	}
	o.Sandbox = func(ctx context.Context) (string, string, bool, error) {
		sb, err := probeSandbox(ctx, *sandboxMode, *insecure)
		if err != nil {
			return "", "", false, err
		}
		return string(sb.Isolation), sb.Describe(), sb.Isolation == pluginhost.IsolationNone, nil
	}
	o.Network = func(ctx context.Context) (string, bool, error) {
		ims := *ims
		if ims == "" && st != nil {
			ims = st.Config.IMS
		}
		eg, err := egressOpts.build(ctx, append([]string{ims, *installRegistry}, kubeconfigServers(*kubeconfig)...))
		if err != nil {
			return "", false, err
		}
		if *insecure {
			return "host network (--insecure-no-sandbox)", true, nil
		}
		sb, err := probeSandbox(ctx, *sandboxMode, false)
		if err != nil {
			return "", false, err
		}
		l := &pluginhost.Loader{Sandbox: sb, Egress: eg}
		return l.DescribeNetwork(), eg.Network == pluginhost.NetworkHost, nil
	}
	o.InCluster = os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	if *kubeconfig != "" {
		if o.Kubeconfig, err = filepath.Abs(*kubeconfig); err != nil {
			fmt.Fprintf(stderr, "agentd preflight: --kubeconfig: %v\n", err)
			return 2
		}
	}
	if slices.Contains(bundled.Bundled, agent.KubeconfigType) {
		o.Kubernetes = func(ctx context.Context) (string, error) {
			return checkKubernetes(ctx, bundled, o.Kubeconfig)
		}
	}
	rs := preflight.Run(ctx, o)
	preflight.Print(stdout, rs)
	if preflight.Failed(rs) {
		return 1
	}
	return 0
}

const supportBundleUsage = `usage: agentd support-bundle -o FILE.tar.gz [--state-dir DIR] [--stack-config FILE]
                            [--secrets-file FILE] [--agent-log FILE]

Collects what the vendor's support needs, for you to review and send: the
agent's version, its configuration with secrets removed, the newest jobs'
logs, the preflight results (run now), your permission state and
break-glass grants, and the local audit copy. Every secret the agent
knows is masked in every file (plain, base64, URL-encoded and
JSON-escaped). MANIFEST.txt says what was done to each file: a file over
8 MiB keeps its newest 8 MiB and says so; the audit chain files are
copied whole and verbatim (they verify as the agent's do) unless a
secret appears in them, and then the records masked are named.
`

func supportBundleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("agentd support-bundle", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() { fmt.Fprint(fset.Output(), supportBundleUsage) }
	out := fset.String("o", "", "the bundle `file` to write (.tar.gz)")
	stackPath := fset.String("stack-config", os.Getenv("BYOC_STACK_CONFIG"), "the install stack's config `file`")
	stateDir := fset.String("state-dir", "", "the agent's state `directory`")
	secretsFile := fset.String("secrets-file", "", "the agent's secrets `file` (its values are masked; it is not included)")
	agentLog := fset.String("agent-log", "", "a `file` of agentd's own log to include")
	ims := fset.String("ims", os.Getenv("BYOC_IMS_URL"), "imsd `URL` for the preflight (default: the stack's)")
	if code, done := flaghelp.Parse(fset, args, stdout); done {
		return code
	}
	if *out == "" || fset.NArg() > 0 {
		fset.Usage()
		return 2
	}
	var st *stack.Stack
	if *stackPath != "" {
		var err error
		if st, err = stack.Open(*stackPath); err != nil {
			fmt.Fprintf(stderr, "agentd support-bundle: %v\n", err)
			return 2
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	rs := preflight.Run(pctx, preflight.Options{Stack: st, IMS: *ims, StateDir: *stateDir, Enrolled: *stateDir != "" && enrolled(*stateDir)})
	cancel()
	var buf bytes.Buffer
	names, err := supportbundle.Write(ctx, &buf, supportbundle.Options{StateDir: *stateDir, Stack: st, SecretsFile: *secretsFile,
		EnrollToken: os.Getenv("BYOC_ENROLL_TOKEN"), Preflight: rs, Version: buildinfo.Get().String("agentd"), AgentLog: *agentLog})
	if err == nil {
		err = atomicfile.Write(*out, buf.Bytes(), 0o600)
	}
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			fmt.Fprintf(stderr, "agentd support-bundle: %v (run it as the agent's user)\n", err)
		} else {
			fmt.Fprintf(stderr, "agentd support-bundle: %v\n", err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (%d files); review it (tar -xzf %s) before you send it\n", *out, len(names), *out)
	for _, n := range names {
		fmt.Fprintln(stdout, "  "+n)
	}
	return 0
}

// checkKubernetes reaches the cluster as a helm job would, by running
// byoc-plugins --check-kubernetes with the job's KUBECONFIG (agentd links
// no Kubernetes client of its own).
func checkKubernetes(ctx context.Context, bundled *pluginhost.Loader, kubeconfig string) (string, error) {
	if err := bundled.CheckBundled(); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bundled.BundledExe, "--check-kubernetes")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "KUBECONFIG=" + kubeconfig}
	for _, k := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", errors.New(msg)
		}
		return "", fmt.Errorf("%s --check-kubernetes: %w", bundled.BundledExe, err)
	}
	return strings.TrimSpace(stdout.String()), nil
}
