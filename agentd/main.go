// Command agentd is byoc's agent: one per customer install, living in the
// customer's account. It dials out to imsd, and runs each job it is handed
// through a component plugin subprocess.
//
//	agentd --ims URL --enroll-token T --state-dir DIR   enrol once, then serve
//	agentd --ims URL --state-dir DIR                    serve with the saved identity
//	agentd --role build --ims URL --enroll-token T ...  the vendor's build agent (build jobs only)
//	agentd plugin TYPE                                  serve a built-in component type (the loader runs this;
//	                                                    the heavy ones are served by byoc-plugins beside agentd)
//	agentd plugin --state-dir DIR pin TYPE SHA256|unpin TYPE|list
//	                                                    the customer's plugin pins (read again by a running agent)
//	agentd permissions --state-dir DIR show|enable MODE|disable MODE|disable-all|enable-all|verify|adopt|reset
//	                                                    the customer's permission modes and kill switch
//	agentd window --state-dir DIR show|set WINDOW...|clear
//	                                                    the customer's maintenance windows (jobs of a release)
//	agentd breakglass --state-dir DIR list|approve ID [--role R] [--for D]|deny ID --reason R|revoke ID
//	                                                    the customer's decisions on break-glass requests
//	agentd identity --state-dir DIR show|rotate [--wait D]|revoke --yes [--reason R]
//	                                                    the agent's own key: rotate it without re-enrolment, or revoke the agent for good
//	agentd update --state-dir DIR policy [--manual|--pin V|--allow R] [--window W]|apply REF|status
//	                                                    the customer's update policy; apply a signed agent release (rolls back on its own)
//	agentd audit --state-dir DIR verify|compare         check the agent's copy of its install's audit chain,
//	                                                    and compare it with imsd's
//	agentd module push --state-dir DIR MODULE_DIR REPO:TAG
//	                                                    put a Terraform module into the install registry
//	agentd --stack-config FILE --state-dir DIR          run from an install stack (its imsd, token, roles, inputs, secrets)
//	agentd --insecure-no-sandbox ...                    run plugins without a sandbox (never in production)
//	agentd preflight [--stack-config FILE] [--state-dir DIR]
//	                                                    check what the install needs; exit 1 on a failure
//	agentd support-bundle -o FILE.tar.gz [--state-dir DIR] [--stack-config FILE]
//	                                                    collect a redacted bundle for the vendor's support
package main

import (
	"cmp"
	"context"
	"crypto"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/kmskey"
	"github.com/byoc-dev/byoc/agentd/ledger"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/agentd/secrets"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/internal/attest/keylesssign"
	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/internal/flaghelp"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/plugins/action"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/build"
	"github.com/byoc-dev/byoc/plugins/bundle"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// builtins are the component types compiled into agentd. They load through
// the same loader and protocol as third-party plugins: agentd re-executes
// itself as "agentd plugin TYPE". Only light types belong here: every
// package linked into agentd runs its init in the agent's own long-lived
// process. The heavy built-in types (bundle.Types: those linking OPA, Helm
// or Kubernetes clients) are served by the companion binary byoc-plugins
// installed beside agentd.
var builtins = map[string]func() sdk.Plugin{
	"action": func() sdk.Plugin { return action.New() },
	// build is served only by the build agent (agentd --role build).
	build.TypeName: func() sdk.Plugin { return build.New() },
}

// sandboxEnv sets agentd --sandbox.
const sandboxEnv = "BYOC_SANDBOX"

// probeSandbox builds the sandbox plugins run in: mode auto, bubblewrap
// or namespaces; insecure is --insecure-no-sandbox.
func probeSandbox(ctx context.Context, mode string, insecure bool) (*pluginhost.Sandbox, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	return pluginhost.ProbeSandbox(ctx, pluginhost.SandboxOptions{Mode: mode, Insecure: insecure, InitExe: self})
}

// agentPaths are the agent's own files that no plugin may see, even
// where they lie inside a directory the sandbox shows (/etc, say): the
// state directory, the secrets file, the policy dir, the install stack's
// config and the files it reads values from.
// checkSigningFlags checks the build agent's signing flags: the three
// --keyless-* flags come together or not at all, and they and
// --artifact-signing-key are for the build agent only. The error names
// the flags given and those missing.
func checkSigningFlags(role, artifactKey, fulcioURL, tsaURL, tokenFile string) error {
	var given, missing []string
	for _, f := range []struct{ name, value string }{
		{"--artifact-signing-key", artifactKey},
		{"--keyless-fulcio-url", fulcioURL}, {"--keyless-tsa-url", tsaURL}, {"--keyless-token-file", tokenFile},
	} {
		switch {
		case f.value != "":
			given = append(given, f.name)
		case f.name != "--artifact-signing-key":
			missing = append(missing, f.name)
		}
	}
	if role != "build" {
		if len(given) > 0 {
			return fmt.Errorf("%s: for the build agent (--role build) only, and this agent's role is %s", strings.Join(given, ", "), role)
		}
		return nil
	}
	given = slices.DeleteFunc(given, func(f string) bool { return f == "--artifact-signing-key" })
	if len(given) > 0 && len(missing) > 0 {
		return fmt.Errorf("keyless signing needs --keyless-fulcio-url, --keyless-tsa-url and --keyless-token-file together: %s given, %s missing",
			strings.Join(given, ", "), strings.Join(missing, ", "))
	}
	return nil
}

// openArtifactKey opens the build agent's --artifact-signing-key: an AWS
// KMS key (awskms://, checked with KMS now: an Ed25519 signing key) or
// an Ed25519 key file. Nil when none is given.
func openArtifactKey(ctx context.Context, role, key string) (crypto.Signer, error) {
	if role != "build" || key == "" {
		return nil, nil
	}
	if !kmskey.IsURI(key) {
		k, err := ocisign.ReadPrivateKey(key)
		if err != nil {
			return nil, err
		}
		return k, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return kmskey.Open(ctx, key, kmskey.Options{Credentials: stack.OwnCredentials(), CABundle: os.Getenv("AWS_CA_BUNDLE")})
}

// signingKeyFile is the file of --artifact-signing-key ("" for a KMS key).
func signingKeyFile(key string) string {
	if kmskey.IsURI(key) {
		return ""
	}
	return key
}

// absPaths makes the non-empty paths absolute.
func absPaths(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			out = append(out, abs)
		}
	}
	return out
}

// agentPaths are the agent's own paths every plugin's sandbox hides: its
// state directory, secrets file, policy directory, the stack's files, and
// the build agent's signing files (its --artifact-signing-key, its
// workload identity's --keyless-token-file).
func agentPaths(stateDir, secretsFile, policyDir string, st *stack.Stack, signingFiles ...string) []string {
	paths := absPaths(signingFiles...)
	add := func(p, rel string) {
		if p == "" {
			return
		}
		if !filepath.IsAbs(p) && rel != "" {
			p = filepath.Join(rel, p)
		}
		if abs, err := filepath.Abs(p); err == nil {
			paths = append(paths, abs)
		}
	}
	add(stateDir, "")
	add(secretsFile, "")
	add(policyDir, "")
	if st != nil {
		add(st.Path, "")
		dir := filepath.Dir(st.Path)
		add(st.Config.SecretsFile, dir)
		add(st.Config.EnrollToken.File, dir)
		for _, s := range st.Config.Secrets {
			add(s.File, dir)
		}
		for _, in := range st.Config.Inputs {
			if in.From != nil {
				add(in.From.File, dir)
			}
		}
	}
	return paths
}

// bundledEnv overrides where agentd looks for byoc-plugins, like
// --bundled-plugins.
const bundledEnv = "BYOC_BUNDLED_PLUGINS"

func main() {
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitArg {
		// The init of a plugin's namespace sandbox (pluginhost), started
		// by the agent itself; not a command for people.
		os.Exit(sandbox.InitMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "plugin" && isPinsCmd(os.Args[2:]) {
		os.Exit(pinsCmd(os.Args[2:], os.Stdout, os.Stderr, time.Now()))
	}
	if len(os.Args) > 1 && os.Args[1] == "plugin" {
		os.Exit(servePlugin(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "permissions" {
		os.Exit(permissionsCmd(os.Args[2:], os.Stdout, os.Stderr, time.Now()))
	}
	if len(os.Args) > 1 && os.Args[1] == "window" {
		os.Exit(windowCmd(os.Args[2:], os.Stdout, os.Stderr, time.Now()))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "breakglass" {
		os.Exit(breakglassCmd(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr, time.Now))
	}
	if len(os.Args) > 1 && os.Args[1] == "session" {
		os.Exit(sessionCmd(ctx, os.Args[2:], os.Stdout, os.Stderr, time.Now))
	}
	if len(os.Args) > 1 && os.Args[1] == "identity" {
		os.Exit(identityCmd(ctx, os.Args[2:], os.Stdout, os.Stderr, time.Now))
	}
	if len(os.Args) > 1 && os.Args[1] == "audit" {
		os.Exit(auditCmd(ctx, os.Args[2:], os.Stdout, os.Stderr, time.Now))
	}
	if len(os.Args) > 1 && os.Args[1] == "egress" {
		os.Exit(egressCmd(os.Args[2:], os.Stdout, os.Stderr, time.Now))
	}
	if len(os.Args) > 1 && os.Args[1] == "update" {
		os.Exit(updateCmd(ctx, os.Args[2:], os.Stdout, os.Stderr, time.Now))
	}
	if len(os.Args) > 1 && os.Args[1] == "policy" {
		os.Exit(policyCmd(os.Args[2:], os.Stdout, os.Stderr, time.Now))
	}
	if len(os.Args) > 1 && os.Args[1] == "telemetry" {
		os.Exit(telemetryCmd(os.Args[2:], os.Stdout, os.Stderr, time.Now))
	}
	if len(os.Args) > 1 && os.Args[1] == "module" {
		os.Exit(moduleCmd(ctx, os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "preflight" {
		os.Exit(preflightCmd(ctx, os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "bundle" {
		os.Exit(bundleCmd(ctx, os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "support-bundle" {
		os.Exit(supportBundleCmd(ctx, os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(run(ctx, os.Args[1:]))
}

// ledgerSettings are the egress ledger's settings: the stack config's e
// (nil: none), unless the flag was given on the command line.
func ledgerSettings(fs *flag.FlagSet, e *stackconfig.EgressLedger, content string, maxBytes int64) (string, int64) {
	if e == nil {
		return content, maxBytes
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["egress-ledger-content"] {
		content = e.Content
	}
	if !given["egress-ledger-max-bytes"] && e.MaxBytes > 0 {
		maxBytes = e.MaxBytes
	}
	return content, maxBytes
}

func servePlugin(args []string) int {
	if len(args) > 0 && slices.Contains(bundle.Types(), args[0]) {
		fmt.Fprintf(os.Stderr, "agentd plugin: the %s type is served by %s, installed beside agentd: %s %s\n", args[0], bundle.Binary, bundle.Binary, args[0])
		return 2
	}
	if len(args) == 0 || builtins[args[0]] == nil {
		fmt.Fprintf(os.Stderr, "agentd plugin: name a built-in type: %s\n", strings.Join(builtinNames(), ", "))
		return 2
	}
	// Under bubblewrap the agent may ask its own plugin binaries to
	// run the sandbox's egress relay themselves.
	if err := sandbox.StartRelayFromEnv(); err != nil {
		fmt.Fprintf(os.Stderr, "egress relay: %v\n", err)
		return 125
	}
	sdk.ServeArgs(builtins[args[0]](), args[1:])
	return 0
}

func builtinNames() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// roleBuiltins are the built-in types an agent of role runs: the build
// agent only build jobs; an install's agent every other type, never a
// build (it holds no push access, and imsd grants it none).
func roleBuiltins(role string) []string {
	if role == "build" {
		return []string{build.TypeName}
	}
	var out []string
	for _, n := range builtinNames() {
		if n != build.TypeName {
			out = append(out, n)
		}
	}
	return out
}

// roleBundled are the types of byoc-plugins an agent of role runs: none
// for the build agent.
func roleBundled(role string) []string {
	if role == "build" {
		return nil
	}
	return bundle.Types()
}

// bundledLoader is a loader that knows the bundled types of role and where
// their companion binary is: path (--bundled-plugins), else byoc-plugins
// beside agentd's own executable.
func bundledLoader(path, role string) (*pluginhost.Loader, error) {
	if path == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
		// os.Executable is the agent's file with symlinks resolved: the
		// companion is installed beside that file.
		path = filepath.Join(filepath.Dir(self), bundle.Binary)
	} else {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("--bundled-plugins: %w", err)
		}
		path = abs
	}
	return &pluginhost.Loader{
		Bundled:     roleBundled(role),
		BundledExe:  path,
		BundledHint: "install it next to agentd or set agentd --bundled-plugins PATH ($" + bundledEnv + ")",
	}, nil
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// agentdUsage heads agentd --help: the commands a customer's admin runs
// beside the agent, which the flags alone do not show.
const agentdUsage = `usage: agentd [flags]          run the agent (enrol once, then serve)
       agentd COMMAND --help   a command's own usage

commands (most take --state-dir DIR, the agent's state directory):
  permissions      the customer's permission modes and kill switch
  window           the customer's maintenance windows
  breakglass       decide the vendor's break-glass requests
  session          the vendor's support sessions: list, watch, kill, play
  plugin           pin, unpin and list plugins (agentd plugin pin|unpin|list)
  update           the agent's update policy; apply a signed agent release
  policy           the customer's supply-chain policy (agentd policy supply-chain)
  telemetry        what of the app's metrics and logs the agent forwards (agentd telemetry show|set)
  audit            verify the agent's copy of the audit chain; compare it with imsd's
  egress           list and sum what the agent sent to imsd (agentd egress list|stats)
  module push      put a Terraform module or Helm chart into the install registry
  preflight        check what the install needs; exit 1 on a failure
  support-bundle   collect a redacted bundle for the vendor's support
  bundle           import an offline bundle from the vendor (agentd bundle import|inventory)

flags:
`

func run(ctx context.Context, args []string) int { return runAgent(ctx, args, nil) }

// offlineFunc is a command that uses the agent as agentd's flags set it
// up, without its stream to imsd (agentd bundle import): it is given the
// agent, its job runner, the install registry and the command's
// arguments (what the flags left).
type offlineFunc struct {
	name string
	run  func(ctx context.Context, a *agent.Agent, runner *agent.PluginRunner, installRegistry string, args []string) int
}

func runAgent(ctx context.Context, args []string, offline *offlineFunc) int {
	fs := flag.NewFlagSet("agentd", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), agentdUsage)
		fs.PrintDefaults()
	}
	var (
		ims, token, stateDir string
		capacity             int
		pluginDirs, pins     multiFlag
		secretsFile          string
		installRegistry      string
		tfProviders          string
		cancelGrace          time.Duration
		rotateKeyEvery       time.Duration
		policyDir            string
		kubeconfig           string
		stackPath            string
		level                slog.Level
		role                 string
		bundledExe           string
		sandboxMode          string
		insecureNoSandbox    bool
		recordingsToVendor   bool
		sandboxReadOnly      multiFlag
		sandboxWritable      multiFlag
		egressOpts           egressFlags
		artifactSigningKey   string
	)
	fs.StringVar(&role, "role", "install", "`install` (an install's agent) or build (the vendor's build agent, the only writer of the vendor registry; enrol it with a token from byoc build agent-token)")
	fs.StringVar(&ims, "ims", os.Getenv("BYOC_IMS_URL"), "imsd `URL`; also $BYOC_IMS_URL")
	fs.StringVar(&token, "enroll-token", os.Getenv("BYOC_ENROLL_TOKEN"), "single-use enrolment `token`, needed once; also $BYOC_ENROLL_TOKEN")
	fs.StringVar(&stateDir, "state-dir", "", "`directory` for the agent's identity and job workspaces")
	fs.IntVar(&capacity, "capacity", 4, "how many jobs run at once")
	fs.Var(&pluginDirs, "plugin-dir", "`directory` searched for byoc-plugin-<type> binaries (repeatable)")
	fs.StringVar(&bundledExe, "bundled-plugins", os.Getenv(bundledEnv), "`path` of "+bundle.Binary+", the companion binary serving the built-in types "+strings.Join(bundle.Types(), ", ")+"; default: "+bundle.Binary+" in the directory of agentd's own executable; also $"+bundledEnv)
	fs.Var(&pins, "plugin-pin", "`type=sha256` pin for an external plugin (repeatable); unpinned plugins never run. The customer's pin file (agentd plugin pin, read again without a restart) wins over it")
	fs.StringVar(&secretsFile, "secrets-file", "", "customer-owned `file` of NAME=value secrets (mode 0600); jobs get those their config lists under \"secrets\", and every value is redacted from job logs, errors and outputs")
	fs.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "`file`: the kubeconfig of the cluster the helm type deploys to (also $KUBECONFIG); without one, the in-cluster config of the agent's pod")
	fs.StringVar(&installRegistry, "install-registry", os.Getenv("BYOC_INSTALL_REGISTRY"), "the install registry `location` every image, chart and module is synced into before it runs: http(s)://HOST[:PORT][/PREFIX], HOST[:PORT][/PREFIX], or oci:DIR (an OCI image layout root); default: an azure or gcp --stack-config's registry (each job reaches it with its mode's identity), else oci:STATE-DIR/registry; also $BYOC_INSTALL_REGISTRY; credentials: the --secrets-file entries BYOC_INSTALL_REGISTRY_USERNAME, _PASSWORD, _TOKEN")
	fs.StringVar(&tfProviders, "terraform-providers", "", "Terraform provider filesystem mirror `directory`: the terraform type installs providers from it only, never from a registry")
	fs.DurationVar(&rotateKeyEvery, "rotate-key-every", 0, "rotate the agent's own key (agentd identity rotate) once it is this `old`, such as 2160h; 0: only when you run agentd identity rotate")
	fs.DurationVar(&cancelGrace, "cancel-grace", time.Minute, "how long a cancelled or timed-out job's plugin may take to stop once interrupted (Terraform saves its state and releases its lock) before it is killed; 0 kills at once")
	fs.StringVar(&policyDir, "policy-dir", "", "customer-owned `directory` of rego policies (*.rego; it and they not writable by group or others); every plan, apply and destroy must pass them, whatever the app config's policies say")
	fs.StringVar(&stackPath, "stack-config", os.Getenv("BYOC_STACK_CONFIG"), "the install stack's config `file` (its imsd URL, enrolment token, a role per permission mode, the customer's inputs and secrets); also $BYOC_STACK_CONFIG")
	fs.TextVar(&level, "log-level", slog.LevelInfo, "log `level`: debug, info, warn, error")
	fs.StringVar(&sandboxMode, "sandbox", os.Getenv(sandboxEnv), "`mode` of the sandbox every plugin (all vendor code) runs in: auto (bubblewrap, else Linux namespaces), bubblewrap or namespaces; also $"+sandboxEnv)
	fs.BoolVar(&recordingsToVendor, "session-recordings-to-vendor", false, "send the vendor (imsd) a copy of each support session's recording after it ends, again at each connection until imsd confirms keeping it; counts as set when each session starts (a session run without it is never sent); off by default: the recording stays in STATE/sessions only")
	fs.BoolVar(&insecureNoSandbox, "insecure-no-sandbox", false, "run plugins WITHOUT a sandbox: vendor code can then read and write everything the agent can, its identity and your controls included; never in production")
	fs.Var(&sandboxReadOnly, "sandbox-read-only", "host `path` every plugin may read in its sandbox, such as a chart directory or an OCI layout named by path in development (repeatable)")
	fs.Var(&sandboxWritable, "sandbox-writable", "host `directory` every plugin may write in its sandbox, such as where a plugin of yours keeps files outside the agent (repeatable); never the agent's state directory")
	fs.StringVar(&artifactSigningKey, "artifact-signing-key", "", "build agent: the Ed25519 key every synced or packaged artifact is signed with in the vendor registry, so that install agents' supply-chain policy can verify it: a key `file` (PKCS#8 PEM, such as imsd's --signing-key) or an AWS KMS key of spec ECC_NIST_EDWARDS25519, awskms:///KEY-ID-OR-ARN (credentials from the environment or the instance profile)")
	var keylessFulcio, keylessTSA, keylessToken string
	fs.StringVar(&keylessFulcio, "keyless-fulcio-url", "", "build agent: base `URL` of a Fulcio-compatible certificate authority; with --keyless-tsa-url and --keyless-token-file every artifact and attestation is also signed keylessly (an ephemeral key certified for the agent's workload identity)")
	fs.StringVar(&keylessTSA, "keyless-tsa-url", "", "build agent: `URL` of the RFC 3161 timestamp authority that timestamps each keyless signature")
	fs.StringVar(&keylessToken, "keyless-token-file", "", "build agent: the `file` holding the workload identity's OIDC token (refreshed by the platform; read at every signature)")
	egressOpts.register(fs)
	ledgerContent := fs.String("egress-ledger-content", "", "what the egress ledger (agentd egress list) keeps in full besides each message's kind, size and hash: `logs`, outputs, or logs,outputs (the job log lines and the job outputs sent to imsd); default none")
	ledgerMax := fs.Int64("egress-ledger-max-bytes", ledger.DefaultMaxBytes, "size in `bytes` at which the egress ledger's file rotates (the ledger keeps up to twice this)")
	showVersion := fs.Bool("version", false, "print the version, commit and build date, and exit")
	if code, done := flaghelp.Parse(fs, args, os.Stdout); done {
		return code
	}
	if *showVersion {
		fmt.Println(buildinfo.Get().String("agentd"))
		return 0
	}
	if fs.NArg() > 0 && offline == nil {
		fmt.Fprintf(os.Stderr, "agentd: unknown command %q (agentd --help lists the commands)\n", fs.Arg(0))
		return 2
	}
	if offline != nil {
		if stateDir == "" {
			fmt.Fprintf(os.Stderr, "agentd %s: --state-dir DIR is required (the enrolled agent's state directory)\n", offline.name)
			return 2
		}
		if !enrolled(stateDir) {
			fmt.Fprintf(os.Stderr, "agentd %s: %s holds no enrolled agent: a bundle's jobs are signed for this install's agent, which enrols once\n", offline.name, stateDir)
			return 1
		}
		// Never dialled: the command runs with no connection to imsd.
		ims, token = cmp.Or(ims, "http://imsd.offline.invalid"), ""
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// An agent update in progress: this start counts, and the update is
	// confirmed once the agent reconnects, else rolled back. Counted
	// before anything else of the start can fail, so that a new version
	// that exits early (a config it refuses) is a crash loop too.
	var pendingUpdate *updateState
	if stateDir != "" && offline == nil {
		var err error
		if pendingUpdate, err = updateAtStart(stateDir, buildinfo.Get().Short(), time.Now(), log); err != nil {
			fmt.Fprintf(os.Stderr, "agentd: agent update: %v\n", err)
			return 1
		}
	}
	if role != "install" && role != "build" {
		fmt.Fprintf(os.Stderr, "agentd: --role %q: want install or build\n", role)
		return 2
	}
	// Before anything is read, started or written.
	if err := checkSigningFlags(role, artifactSigningKey, keylessFulcio, keylessTSA, keylessToken); err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
		return 2
	}
	artifactKey, err := openArtifactKey(ctx, role, artifactSigningKey)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentd: --artifact-signing-key: %v\n", err)
		return 2
	}
	if k, ok := artifactKey.(*kmskey.Key); ok {
		log.Info("artifacts are signed with an AWS KMS key", "key", k.ARN, "key_id", k.KeyID())
	}
	pinMap := map[string]string{}
	for _, p := range pins {
		typ, sum, ok := strings.Cut(p, "=")
		if !ok || typ == "" || len(sum) != 64 {
			fmt.Fprintf(os.Stderr, "agentd: --plugin-pin %q: want TYPE=SHA256 (64 hex digits)\n", p)
			return 2
		}
		pinMap[typ] = strings.ToLower(sum)
	}
	var secretMap map[string]string
	if secretsFile != "" {
		var err error
		if secretMap, err = secrets.Load(secretsFile); err != nil {
			fmt.Fprintf(os.Stderr, "agentd: --secrets-file: %v\n", err)
			return 2
		}
	}
	if policyDir != "" {
		// Checked at start so a mistake shows now, not at the first
		// deploy; read again for every job.
		var err error
		if policyDir, err = filepath.Abs(policyDir); err == nil {
			_, err = agent.CustomerPolicies(policyDir)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
			return 2
		}
	}
	if kubeconfig != "" {
		// A relative path would be read from each job's work dir.
		abs, err := filepath.Abs(kubeconfig)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentd: --kubeconfig: %v\n", err)
			return 2
		}
		kubeconfig = abs
	}
	// An install stack: imsd, the enrolment token (until enrolled), the
	// customer's secrets and inputs, and a role per permission mode.
	var st *stack.Stack
	var stackValues stack.Values
	if stackPath != "" {
		var err error
		if st, err = stack.Open(stackPath); err != nil {
			fmt.Fprintf(os.Stderr, "agentd: --stack-config: %v\n", err)
			return 2
		}
		if ims == "" {
			ims = st.Config.IMS
		}
		if token == "" && stateDir != "" && !enrolled(stateDir) {
			if token, err = st.EnrollToken(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
				return 1
			}
		}
		if stackValues, err = st.Values(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
			return 1
		}
		if secretMap == nil {
			secretMap = map[string]string{}
		}
		for k, v := range stackValues.Secrets {
			if _, dup := secretMap[k]; !dup {
				secretMap[k] = v
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentd: find own executable: %v\n", err)
		return 1
	}
	if stateDir != "" {
		if stateDir, err = filepath.Abs(stateDir); err != nil {
			fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
			return 1
		}
	}
	if installRegistry == "" && st != nil && st.Config.Registry != "" &&
		(st.Config.Format == stackconfig.FormatAzure || st.Config.Format == stackconfig.FormatGCP) {
		// The stack's registry (an Azure Container Registry, an Artifact
		// Registry repository): each job reaches it with its mode's
		// identity (agentd/stack, internal/ocicopy's token exchange).
		installRegistry = st.Config.Registry
	}
	if installRegistry == "" && stateDir != "" {
		installRegistry = "oci:" + filepath.Join(stateDir, "registry")
	}
	if installRegistry != "" {
		reg, err := ocicopy.ParseRegistry(installRegistry)
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentd: --install-registry: %v\n", err)
			return 2
		}
		installRegistry = reg.String()
	}
	loader, err := bundledLoader(bundledExe, role)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
		return 2
	}
	loader.SelfExe = self
	loader.SelfArgs = func(typ string) []string { return []string{"plugin", typ} }
	loader.Builtins = roleBuiltins(role)
	loader.Dirs = pluginDirs
	loader.Pins = pinMap
	if v := os.Getenv(sdk.ReattachEnv); v != "" {
		if loader.Reattach, err = sdk.ParseReattach(v); err != nil {
			fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
			return 2
		}
		for typ, r := range loader.Reattach {
			fmt.Fprintf(os.Stderr, "agentd: WARNING: %s: jobs of type %s call the plugin in debug mode at %s (pid %d): not pinned, not sandboxed; for development only\n",
				sdk.ReattachEnv, typ, r.Addr.String, r.Pid)
			log.Warn("plugin in debug mode", "type", typ, "addr", r.Addr.String, "pid", r.Pid)
		}
	}
	if stateDir != "" {
		loader.PinWatcher = &pluginhost.PinWatcher{Path: filepath.Join(stateDir, pluginhost.PinFileName)}
		if reg, err := ocicopy.ParseRegistry(installRegistry); err == nil {
			// A release pinned with agentd plugin pin TYPE --release is
			// fetched from the install registry by the first job that
			// needs it.
			ri := &releaseInstaller{stateDir: stateDir, registry: reg, creds: ocicopy.CredentialsFromEnv(secretMap, "BYOC_INSTALL_REGISTRY"),
				platform: runtime.GOOS + "/" + runtime.GOARCH, by: "agentd", now: time.Now}
			loader.Fetch = ri.fetch
		}
	}
	loader.Logger = log
	loader.OwnRelay = true
	if loader.Sandbox, err = probeSandbox(ctx, sandboxMode, insecureNoSandbox); err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
		return 1
	}
	if insecureNoSandbox {
		fmt.Fprintln(os.Stderr, "agentd: WARNING: --insecure-no-sandbox: plugins run WITHOUT a sandbox; vendor code can read and write "+
			"everything this agent can, including its identity, the secrets file and the customer's permission and break-glass files")
		log.Warn("vendor code sandbox OFF (--insecure-no-sandbox)")
	} else {
		log.Info("vendor code sandbox", "isolation", loader.Sandbox.Isolation, "detail", loader.Sandbox.Detail)
	}
	if bad := identity.ReadableKeyFiles(stateDir); len(bad) > 0 {
		log.Warn("the agent's private key is readable by other users: whoever reads it can connect as this agent; chmod 600 the files (agentd preflight)",
			"files", strings.Join(bad, "; "))
	}
	// The endpoints the customer configured the agent with stay
	// reachable for plugins even on this machine's loopback.
	endpoints := []string{ims, installRegistry}
	if offline != nil {
		// No connection to imsd: plugins get no route to it either.
		endpoints = []string{installRegistry}
	}
	if loader.Egress, err = egressOpts.build(ctx, append(endpoints, kubeconfigServers(kubeconfig)...)); err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
		return 2
	}
	if w := egressWarning(loader.Egress.Network); w != "" && !insecureNoSandbox {
		fmt.Fprintln(os.Stderr, w)
		log.Warn("vendor code network is the HOST's (--sandbox-network=host)")
	}
	if w := egressOpts.insecureWarning(); w != "" && !insecureNoSandbox {
		fmt.Fprintln(os.Stderr, w)
	}
	if !insecureNoSandbox {
		log.Info("vendor code network", "network", loader.DescribeNetwork())
	}
	for _, f := range []struct {
		name  string
		paths multiFlag
	}{{"--sandbox-read-only", sandboxReadOnly}, {"--sandbox-writable", sandboxWritable}} {
		for i, p := range f.paths {
			abs, err := filepath.Abs(p)
			if err == nil {
				_, err = os.Stat(abs)
			}
			if err == nil && stateDir != "" && (abs == stateDir || strings.HasPrefix(stateDir, abs+"/") || strings.HasPrefix(abs, stateDir+"/")) {
				err = fmt.Errorf("%s overlaps the agent's state directory %s, which vendor code must never see", abs, stateDir)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "agentd: %s: %v\n", f.name, err)
				return 2
			}
			f.paths[i] = abs
		}
	}
	// The install registry reaches plugins through InstallRegistry.
	pluginEnv := map[string]string{}
	if tfProviders != "" {
		if pluginEnv["BYOC_TERRAFORM_PROVIDERS"], err = filepath.Abs(tfProviders); err != nil {
			fmt.Fprintf(os.Stderr, "agentd: --terraform-providers: %v\n", err)
			return 2
		}
	}
	runner := &agent.PluginRunner{Loader: loader, WorkRoot: filepath.Join(stateDir, "jobs"),
		StateRoot: filepath.Join(stateDir, "components"), LogRoot: filepath.Join(stateDir, "logs"), Secrets: secretMap, Logger: log,
		PolicyDir: policyDir, InstallRegistry: installRegistry, PluginEnv: pluginEnv, CancelGrace: cancelGrace, Kubeconfig: kubeconfig,
		SandboxReadOnly: sandboxReadOnly, SandboxWritable: sandboxWritable, SandboxHidden: agentPaths(stateDir, secretsFile, policyDir, st, signingKeyFile(artifactSigningKey), keylessToken)}
	if role == "build" {
		// The build agent's credentials to read private sources: the
		// secrets BYOC_SOURCE_REGISTRY_USERNAME, _PASSWORD, _TOKEN.
		runner.OperationSecretsPrefix = build.SourceCredentialsPrefix
		if artifactKey != nil {
			runner.ArtifactKey = artifactKey
		}
		if keylessFulcio != "" { // all three (checkSigningFlags)
			runner.KeylessSign = keylesssign.Signer{FulcioURL: keylessFulcio, TSAURL: keylessTSA, TokenFile: keylessToken}
		}
	}
	if st != nil {
		runner.Credentials = stackCredentials(st, stateDir, time.Now)
		runner.Inputs = stackValues.Inputs
		runner.Redact = stackValues.Sensitive
	}
	defer runner.Close()
	// A previous agentd killed mid-job left its workspaces, its plugins'
	// socket dirs and its steps' cgroups; no job of this one runs yet.
	// (Not for an offline command: the agent itself may be running.)
	if stateDir != "" && offline == nil {
		swept, err := runner.Sweep()
		if !swept.Empty() {
			log.Info("removed leftovers of a previous run", "workspaces", swept.Workspaces, "socket_dirs", swept.SocketDirs, "cgroups", swept.Cgroups)
		}
		if err != nil {
			log.Warn("sweep leftovers at start", "err", err)
		}
	}
	if st != nil {
		*ledgerContent, *ledgerMax = ledgerSettings(fs, st.Config.EgressLedger, *ledgerContent, *ledgerMax)
	}
	content, err := ledger.ParseContent(*ledgerContent)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
		return 2
	}
	var led *ledger.Ledger
	if stateDir != "" {
		if led, err = ledger.Open(stateDir, ledger.Options{MaxBytes: *ledgerMax, Content: content}); err != nil {
			fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
			return 1
		}
		defer led.Close()
	}
	// An agent release imsd offers is applied as the customer's update
	// policy allows (update_offer.go), in this process's context.
	// One the customer's update window deferred is applied when the
	// window opens (runDeferredOffers), after a restart too, unless imsd
	// withdrew it meanwhile (withdrawOffer); one that asked for it, only
	// once imsd confirms it then (UpdateOffer.confirm).
	var a *agent.Agent
	var onOffer func(context.Context, string, string, bool)
	var onWithdrawal func(context.Context, string)
	startDeferred := func() {}
	if stateDir != "" {
		var offerMu sync.Mutex
		wake := make(chan struct{}, 1)
		onOffer = func(_ context.Context, offerID, release string, confirm bool) {
			offerMu.Lock()
			defer offerMu.Unlock()
			applyOffer(ctx, stateDir, offerID, release, confirm, a.Note, log)
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		apply := func(ctx context.Context, offerID, release string) { onOffer(ctx, offerID, release, false) }
		onWithdrawal = func(_ context.Context, offerID string) {
			offerMu.Lock()
			defer offerMu.Unlock()
			withdrawOffer(stateDir, offerID, a.Note, log)
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		startDeferred = func() { go runDeferredOffers(ctx, stateDir, wake, time.Now, apply, a.ReportNow, log) }
	}
	a, err = agent.New(ctx, agent.Config{
		IMSURL:             ims,
		EnrollToken:        token,
		StateDir:           stateDir,
		Capacity:           capacity,
		Runner:             runner,
		Version:            buildinfo.Get().Short(),
		Logger:             log,
		Role:               role,
		Stack:              stackReport(st, stackValues),
		PinWatcher:         loader.PinWatcher,
		RotateKeyEvery:     rotateKeyEvery,
		Ledger:             led,
		UpdateReport:       func() *agentv1.UpdateReport { return updateReport(stateDir) },
		OnUpdateOffer:      onOffer,
		OnUpdateWithdrawal: onWithdrawal,
		Shell:              shellConfig(role, runner, recordingsToVendor),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
		return 1
	}
	if stateDir != "" {
		notes, err := takeUpdateNotes(stateDir)
		if err != nil {
			log.Error("agent update notes", "err", err)
		}
		for _, n := range notes {
			a.Note(n.Kind, n.Subject, n.Data)
		}
	}
	if offline != nil {
		return offline.run(ctx, a, runner, installRegistry, fs.Args())
	}
	if stateDir != "" {
		go func() {
			if err := watchUpdate(ctx, stateDir, buildinfo.Get().Short(), time.Second, a.Drain, log); err != nil {
				log.Error("agent update", "err", err)
			}
		}()
		startDeferred()
	}
	if pendingUpdate != nil {
		go func() {
			if err := confirmUpdate(ctx, stateDir, pendingUpdate, a.WaitConnected, a.Note, log); err != nil {
				log.Error("agent update", "err", err)
			}
		}()
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
		return 1
	}
	return 0
}

// shellConfig serves support shells on an install agent (the build
// agent serves none).
func shellConfig(role string, runner *agent.PluginRunner, toVendor bool) agent.ShellConfig {
	if role == "build" {
		return agent.ShellConfig{}
	}
	return agent.ShellConfig{Start: runner.Shell, RecordingsToVendor: toVendor}
}
