// Package preflight checks what an install's agent needs before it
// enrols, and on demand (`agentd preflight`): egress to imsd, the clock
// against imsd's, each enabled permission mode's role assumable, the
// customer's values readable, the install's registry reachable, the
// companion binary of the heavy built-in types (byoc-plugins) in place, the
// sandbox vendor code runs in, the Kubernetes API server (when the app has
// helm components or a kubeconfig is given), and disk space. Each check
// passes or fails with a fix; a mode the customer
// turned off is reported as off, not as a failure.
package preflight

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// The results of a check.
const (
	Pass = "pass"
	Fail = "FAIL"
	Off  = "off"
)

// Result is one check's outcome.
type Result struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	// Fix says what to do about a failure.
	Fix string `json:"fix,omitempty"`
}

// Options says what to check.
type Options struct {
	Stack *stack.Stack
	// IMS is imsd's URL (the stack's when empty).
	IMS string
	// StateDir is the agent's state directory (disk space, enrolment).
	StateDir string
	// Enrolled skips the enrolment token check.
	Enrolled bool
	// MaxSkew is the largest clock difference allowed (30s).
	MaxSkew time.Duration
	// MinFree is the least free space in StateDir (1 GiB).
	MinFree uint64
	// HTTPClient reaches imsd and the registry (a 5 s timeout when nil).
	HTTPClient *http.Client
	Now        func() time.Time
	// Bundled, if set, checks the companion binary byoc-plugins as the
	// plugin loader does before it runs one of its types
	// (pluginhost.Loader.CheckBundled); BundledPath names it.
	Bundled     func() error
	BundledPath string
	// Sandbox, if set, builds the sandbox vendor code runs in
	// (pluginhost.ProbeSandbox) and says which; insecure reports that
	// the customer turned it off (agentd --insecure-no-sandbox).
	Sandbox func(context.Context) (isolation, detail string, insecure bool, err error)
	// Network, if set, says what network vendor code has in the sandbox
	// (agentd --sandbox-network and the egress flags); host reports the
	// machine's own network (--sandbox-network=host).
	Network func(context.Context) (detail string, host bool, err error)
	// Kubeconfig is agentd's --kubeconfig (or $KUBECONFIG); InCluster
	// says the agent runs in a Kubernetes pod (KUBERNETES_SERVICE_HOST).
	Kubeconfig string
	InCluster  bool
	// Kubernetes, if set, reaches the cluster's API server as a helm job
	// would (GET /version) and says where and what it is. The check runs
	// when the stack says the app has helm components or a cluster is
	// configured.
	Kubernetes func(ctx context.Context) (string, error)
}

// Run runs every check, in order.
func Run(ctx context.Context, o Options) []Result {
	if o.MaxSkew == 0 {
		o.MaxSkew = 30 * time.Second
	}
	if o.MinFree == 0 {
		o.MinFree = 1 << 30
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	ims := o.IMS
	if ims == "" && o.Stack != nil {
		ims = o.Stack.Config.IMS
	}
	var out []Result
	out = append(out, checkIMS(ctx, o, ims)...)
	if o.Stack != nil {
		out = append(out, checkRoles(ctx, o)...)
		out = append(out, checkValues(ctx, o)...)
		out = append(out, checkRegistry(ctx, o))
		out = append(out, checkRegistryWritable(ctx, o)...)
	}
	if o.Bundled != nil {
		out = append(out, checkBundled(ctx, o))
	}
	if o.Sandbox != nil {
		out = append(out, checkSandbox(ctx, o))
	}
	if o.Network != nil {
		out = append(out, checkNetwork(ctx, o))
	}
	if r, ok := checkKubernetes(ctx, o); ok {
		out = append(out, r)
	}
	if o.StateDir != "" {
		out = append(out, checkKeyFiles(o))
	}
	out = append(out, checkDisk(o))
	return out
}

// checkKeyFiles fails when users other than the agent's own may read a
// file of the state directory that holds the agent's private key.
func checkKeyFiles(o Options) Result {
	r := Result{Check: "identity key files", Status: Pass, Detail: "readable by the agent's user only"}
	if bad := identity.ReadableKeyFiles(o.StateDir); len(bad) > 0 {
		r.Status = Fail
		r.Detail = strings.Join(bad, "; ") + ": whoever reads the key can connect as this agent and take its jobs"
		r.Fix = "chmod 600 those files (the agent writes them 0600; a copy, a restore or a volume's group ownership changed them)"
	}
	return r
}

// checkSandbox builds the sandbox every plugin runs in, as the agent
// does at start, and says which is in force.
func checkSandbox(ctx context.Context, o Options) Result {
	r := Result{Check: "vendor code sandbox"}
	iso, detail, insecure, err := o.Sandbox(ctx)
	switch {
	case err != nil:
		r.Status, r.Detail = Fail, err.Error()
		r.Fix = "install bubblewrap (apt-get install bubblewrap) or allow unprivileged user namespaces; agentd refuses to run vendor code without a sandbox unless started with --insecure-no-sandbox"
	case insecure:
		r.Status, r.Detail = Off, iso+": "+detail
	default:
		r.Status, r.Detail = Pass, iso+": "+detail
	}
	return r
}

// checkNetwork says what vendor code's network is: off when it is the
// machine's own.
func checkNetwork(ctx context.Context, o Options) Result {
	r := Result{Check: "vendor code network"}
	detail, host, err := o.Network(ctx)
	switch {
	case err != nil:
		r.Status, r.Detail, r.Fix = Fail, err.Error(), "fix the --sandbox-network and --sandbox-egress-* flags"
	case host:
		r.Status, r.Detail = Off, detail
		r.Fix = "drop --sandbox-network=host: vendor code then reaches the network only through the agent's egress proxy"
	default:
		r.Status, r.Detail = Pass, detail
	}
	return r
}

// checkBundled checks that the companion binary is in place, checked as
// the loader checks it, and runs (its --version).
func checkBundled(ctx context.Context, o Options) Result {
	r := Result{Check: "bundled plugins"}
	if err := o.Bundled(); err != nil {
		r.Status, r.Detail = Fail, err.Error()
		r.Fix = "install byoc-plugins from the same release beside agentd (mode 0755, owned by root), or point agentd at it with --bundled-plugins"
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, o.BundledPath, "--version").Output()
	if err != nil {
		r.Status, r.Detail = Fail, fmt.Sprintf("%s --version: %v", o.BundledPath, err)
		r.Fix = "install byoc-plugins for this machine (linux/amd64) from the same release as agentd"
		return r
	}
	r.Status, r.Detail = Pass, fmt.Sprintf("%s (%s)", o.BundledPath, strings.TrimSpace(string(out)))
	return r
}

// checkKubernetes checks the cluster helm components deploy to: when the
// stack says the app has some, or a kubeconfig is given. ok is false when
// there is nothing to check.
func checkKubernetes(ctx context.Context, o Options) (r Result, ok bool) {
	needed := o.Stack != nil && o.Stack.Config.Kubernetes
	configured := o.Kubeconfig != "" || o.InCluster
	if !needed && !configured {
		return Result{}, false
	}
	r = Result{Check: "kubernetes"}
	const fix = "start agentd with --kubeconfig FILE (or set KUBECONFIG) naming a cluster this machine reaches; `kubectl --kubeconfig FILE version` checks the same"
	if !configured {
		r.Status, r.Detail, r.Fix = Fail, "the app has helm components and agentd has no --kubeconfig (nor $KUBECONFIG) and is not in a Kubernetes pod", fix
		return r, true
	}
	if o.Kubernetes == nil {
		r.Status, r.Detail, r.Fix = Fail, "no byoc-plugins to reach the cluster with", "install byoc-plugins from the same release beside agentd, or point agentd at it with --bundled-plugins"
		return r, true
	}
	v, err := o.Kubernetes(ctx)
	if err != nil {
		r.Status, r.Detail, r.Fix = Fail, err.Error(), fix
		return r, true
	}
	r.Status, r.Detail = Pass, v
	return r, true
}

// Failed reports whether any check failed.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// Print writes the results as a table, each failure followed by its fix.
func Print(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Check, r.Status, r.Detail)
		if r.Status == Fail && r.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", r.Fix)
		}
	}
	tw.Flush()
	n := 0
	for _, r := range rs {
		if r.Status == Fail {
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "preflight passed")
	} else {
		fmt.Fprintf(w, "preflight failed: %d of %d checks\n", n, len(rs))
	}
}

func checkIMS(ctx context.Context, o Options, ims string) []Result {
	egress := Result{Check: "egress to imsd"}
	skew := Result{Check: "clock skew"}
	if ims == "" {
		egress.Status, egress.Detail, egress.Fix = Fail, "no imsd URL", "pass --ims URL or --stack-config FILE"
		skew.Status, skew.Detail = Fail, "not checked: imsd unknown"
		return []Result{egress, skew}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(ims, "/")+"/healthz", nil)
	if err != nil {
		egress.Status, egress.Detail, egress.Fix = Fail, err.Error(), "fix the imsd URL"
		return []Result{egress, {Check: "clock skew", Status: Fail, Detail: "not checked: imsd unreachable"}}
	}
	sent := o.Now()
	resp, err := o.HTTPClient.Do(req)
	if err != nil {
		egress.Status, egress.Detail = Fail, err.Error()
		egress.Fix = "allow outbound HTTPS from the agent to " + ims + " (security group egress, NACLs, proxy, DNS)"
		return []Result{egress, {Check: "clock skew", Status: Fail, Detail: "not checked: imsd unreachable", Fix: "fix egress to imsd first"}}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) //nolint:errcheck // only draining
	resp.Body.Close()
	got := o.Now()
	egress.Status, egress.Detail = Pass, fmt.Sprintf("%s answered %d in %s", ims, resp.StatusCode, got.Sub(sent).Round(time.Millisecond))
	if resp.StatusCode >= 500 {
		egress.Status, egress.Fix = Fail, "imsd is reachable but unhealthy: ask the vendor"
	}
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		skew.Status, skew.Detail, skew.Fix = Fail, "imsd's answer has no Date header", "ask the vendor (a proxy may strip it)"
		return []Result{egress, skew}
	}
	// Date has a resolution of a second; the request took got-sent.
	mid := sent.Add(got.Sub(sent) / 2)
	d := mid.Sub(date)
	if d < 0 {
		d = -d
	}
	d = max(d-time.Second, 0)
	skew.Status, skew.Detail = Pass, fmt.Sprintf("within %s of imsd's clock (at most %s)", d.Round(time.Second), o.MaxSkew)
	if d > o.MaxSkew {
		skew.Status, skew.Detail = Fail, fmt.Sprintf("%s off imsd's clock (at most %s allowed: leases, job signatures and break-glass grants are timed)", d.Round(time.Second), o.MaxSkew)
		skew.Fix = "synchronise the clock (chrony or systemd-timesyncd; on EC2 the Amazon Time Sync Service, 169.254.169.123)"
	}
	return []Result{egress, skew}
}

func checkRoles(ctx context.Context, o Options) []Result {
	c := o.Stack.Config
	var out []Result
	check := func(label, mode, grantRole string, r stackconfig.Role) {
		res := Result{Check: label}
		if !r.Enabled {
			res.Status, res.Detail = Off, fmt.Sprintf("turned off (%s=false): its jobs will fail", r.Parameter)
			out = append(out, res)
			return
		}
		if c.Format == stackconfig.FormatLocal {
			res.Status, res.Detail = Pass, "on (local stack: jobs get no cloud credentials)"
			out = append(out, res)
			return
		}
		arn, err := o.Stack.CheckRole(ctx, mode, grantRole)
		if err != nil {
			res.Status, res.Detail = Fail, err.Error()
			res.Fix = fmt.Sprintf("check that the stack created %s (%s=true), that its trust policy names the agent's role, and that the agent's role may assume it", r.Name, r.Parameter)
			if c.Format == stackconfig.FormatAzure {
				res.Fix = fmt.Sprintf("check that the deployment created the managed identity %s (%s=true) and attached it to the agent's VM", r.Name, r.Parameter)
			}
			if c.Format == stackconfig.FormatGCP {
				res.Fix = fmt.Sprintf("check that the deployment created the service account %s (variable %s = true) and granted the agent's service account %s roles/iam.serviceAccountTokenCreator on it, and that the IAM Credentials API (iamcredentials.googleapis.com) is enabled in the project", r.ServiceAccount, r.Parameter, c.GCP.AgentServiceAccount)
			}
		} else {
			res.Status, res.Detail = Pass, "assumed "+arn+" (with a deny-all session policy)"
			if c.Format == stackconfig.FormatAzure {
				res.Detail = "got a token of " + arn + " (dropped)"
			}
			if c.Format == stackconfig.FormatGCP {
				res.Detail = "impersonated " + arn + " (a one-minute token, dropped)"
			}
		}
		out = append(out, res)
	}
	for _, m := range stackconfig.Modes {
		r, ok := c.Modes[m]
		if !ok {
			out = append(out, Result{Check: "role " + m, Status: Off, Detail: "the stack has no role for it (" + stackconfig.ModeParameter(m) + ")"})
			continue
		}
		check("role "+m, m, "", r)
	}
	for _, name := range sortedKeys(c.BreakGlassRoles) {
		check("break-glass role "+name, "break_glass", name, c.BreakGlassRoles[name])
	}
	return out
}

func checkValues(ctx context.Context, o Options) []Result {
	var out []Result
	if !o.Enrolled {
		r := Result{Check: "enrolment token"}
		if _, err := o.Stack.EnrollToken(ctx); err != nil {
			r.Status, r.Detail = Fail, err.Error()
			r.Fix = "store the token from `byoc install token " + o.Stack.Config.Install + "` in " + o.Stack.Config.EnrollToken.String() + ", readable by the agent"
		} else {
			r.Status, r.Detail = Pass, "readable from "+o.Stack.Config.EnrollToken.String()
		}
		out = append(out, r)
	}
	r := Result{Check: "customer inputs and secrets"}
	v, err := o.Stack.Values(ctx)
	if err != nil {
		r.Status, r.Detail = Fail, err.Error()
		r.Fix = "check the stack's secrets exist and the agent's role may read them (secretsmanager:GetSecretValue)"
		if c := o.Stack.Config; c.Format == stackconfig.FormatGCP {
			r.Fix = "check the stack's Secret Manager secrets exist in project " + c.GCP.Project + " with a version, and that " + c.GCP.AgentServiceAccount + " has roles/secretmanager.secretAccessor on them"
		}
	} else {
		r.Status, r.Detail = Pass, fmt.Sprintf("%d of %d inputs set, %d of %d secrets set", len(v.Inputs), len(o.Stack.Config.Inputs), len(v.Secrets), len(o.Stack.Config.Secrets))
	}
	return append(out, r)
}

func checkRegistry(ctx context.Context, o Options) Result {
	reg := o.Stack.Config.Registry
	r := Result{Check: "registry"}
	if reg == "" {
		r.Status, r.Detail = Pass, "none configured (local stack)"
		return r
	}
	host, _, _ := strings.Cut(reg, "/")
	scheme := "https"
	if strings.HasPrefix(host, "localhost") || strings.HasPrefix(host, "127.") {
		scheme = "http"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+host+"/v2/", nil)
	if err != nil {
		r.Status, r.Detail = Fail, err.Error()
		return r
	}
	resp, err := o.HTTPClient.Do(req)
	if err != nil {
		r.Status, r.Detail = Fail, err.Error()
		r.Fix = "allow outbound HTTPS to " + host + " (or add an ECR VPC endpoint)"
		var tlsErr *tls.CertificateVerificationError
		if errors.As(err, &tlsErr) {
			r.Fix = "the registry's certificate is not trusted by this machine"
		}
		return r
	}
	resp.Body.Close()
	// 200 or 401 (a token is needed) both mean an OCI registry answered.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnauthorized {
		r.Status, r.Detail, r.Fix = Fail, fmt.Sprintf("%s/v2/ answered %d, not a registry's 200 or 401", host, resp.StatusCode), "check the registry's address in the stack"
		return r
	}
	r.Status, r.Detail = Pass, fmt.Sprintf("%s answered %d", host, resp.StatusCode)
	return r
}

// checkRegistryWritable checks, on an Azure or Google Cloud stack, that
// each turned-on mode's identity may push to the install registry.
func checkRegistryWritable(ctx context.Context, o Options) []Result {
	c := o.Stack.Config
	var out []Result
	for _, m := range stackconfig.Modes {
		r, ok := c.Modes[m]
		if !ok || !r.Enabled {
			continue
		}
		res := Result{Check: "registry writable by " + m}
		detail, cloud, err := o.Stack.CheckRegistry(ctx, m)
		if !cloud {
			return nil
		}
		if err != nil {
			res.Status, res.Detail = Fail, err.Error()
			switch c.Format {
			case stackconfig.FormatAzure:
				res.Fix = fmt.Sprintf("give the managed identity %s AcrPush on the registry %s (the template does while %s is true; redeploy it if the role assignment was removed)", r.Name, c.Registry, r.Parameter)
			case stackconfig.FormatGCP:
				res.Fix = fmt.Sprintf("give the service account %s roles/artifactregistry.writer on the repository %s (the configuration does while %s = true; apply it again if the binding was removed)", r.ServiceAccount, c.Registry, r.Parameter)
			}
		} else {
			res.Status, res.Detail = Pass, detail
		}
		out = append(out, res)
	}
	return out
}

func checkDisk(o Options) Result {
	r := Result{Check: "disk space"}
	dir := o.StateDir
	if dir == "" {
		dir = "."
	}
	// The state dir may not exist before the first start: its parent.
	for {
		if _, err := os.Stat(dir); err == nil || dir == "/" || dir == "." {
			break
		}
		dir = parent(dir)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		r.Status, r.Detail = Fail, err.Error()
		return r
	}
	free := st.Bavail * uint64(st.Bsize)
	r.Status, r.Detail = Pass, fmt.Sprintf("%s free in %s", bytesText(free), dir)
	if free < o.MinFree {
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s free in %s, want at least %s (job workspaces, component state, plugin downloads)", bytesText(free), dir, bytesText(o.MinFree))
		r.Fix = "free space there, or grow the volume"
	}
	return r
}

func parent(p string) string {
	i := strings.LastIndex(strings.TrimRight(p, "/"), "/")
	switch {
	case i < 0:
		return "."
	case i == 0:
		return "/"
	}
	return p[:i]
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
