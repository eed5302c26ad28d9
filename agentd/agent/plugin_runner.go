package agent

import (
	"cmp"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/agentd/egress"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	"github.com/byoc-dev/byoc/plugins/sdk/redact"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// KeylessSigner signs keylessly (keylesssign.Signer): an attestation's
// statement as a DSSE bundle, an artifact signature's payload as a
// message signature bundle.
type KeylessSigner interface {
	Bundle(context.Context, attest.Statement) (*bundle.Bundle, error)
	SignMessage(context.Context, []byte) (*bundle.Bundle, []*x509.Certificate, error)
}

// PluginRunner runs each job in a fresh component plugin subprocess, in a
// workspace of its own under WorkRoot, with its component's state
// directory under StateRoot.
type PluginRunner struct {
	Loader *pluginhost.Loader
	// WorkRoot holds the job workspaces, WORKROOT/<job>-<attempt>/: created
	// empty for an attempt and deleted when it ends (STATE/jobs).
	WorkRoot string
	// StateRoot holds the components' persistent state directories,
	// STATEROOT/<component>/ (STATE/components): kept across jobs and
	// restarts, never swept, never sent to imsd; one job of a component
	// holds its directory at a time. Empty: jobs get no state directory.
	StateRoot string
	// Secrets are the customer's secrets, by name (from the agent's
	// secrets file). A job receives those its config names in a
	// top-level "secrets" list, as environment variables of its
	// operation; the values of all of them are redacted from every log
	// line, error and output the job sends back.
	Secrets map[string]string
	// OperationSecretsPrefix, when set, gives every operation the
	// secrets whose names start with it, unasked (the build agent's
	// source registry credentials, BYOC_SOURCE_REGISTRY_*), redacted like
	// every secret.
	OperationSecretsPrefix string
	// InstallRegistry is the install registry's location (agentd
	// --install-registry: a registry URL, or oci:DIR for an OCI image
	// layout root), given to every plugin as BYOC_INSTALL_REGISTRY. Its
	// credentials are the secrets named BYOC_INSTALL_REGISTRY_USERNAME,
	// _PASSWORD and _TOKEN, which every operation gets in its
	// environment (redacted like every secret).
	InstallRegistry string
	// ArtifactKey, on the build agent (agentd --artifact-signing-key),
	// signs every artifact a build job syncs or packages, in the vendor
	// registry (internal/ocisign), after the job succeeded: an Ed25519
	// file key (ed25519.PrivateKey) or an AWS KMS key (agentd/kmskey),
	// any crypto.Signer whose public key is Ed25519.
	ArtifactKey crypto.Signer
	// KeylessSign, on the build agent (agentd --keyless-fulcio-url,
	// --keyless-tsa-url, --keyless-token-file), signs every artifact a
	// build job syncs or packages and every attestation of it keylessly
	// too (internal/attest/keylesssign): an ephemeral key certified for
	// the agent's workload identity, with an RFC 3161 timestamp.
	KeylessSign KeylessSigner
	// Inputs are the customer-provided inputs the install stack holds, by
	// name. A job's config lists those it refers to under
	// "customer_inputs"; the agent puts each value in place of its
	// {{ .inputs.NAME }} and removes the list.
	Inputs map[string]string
	// Redact lists more values redacted from every job (the install
	// stack's sensitive inputs).
	Redact []string
	// PluginEnv is added to the environment of every plugin and of its
	// operations: the agent-wide settings plugins read (the install
	// registry, the Terraform provider mirror). Never secrets: it is the
	// plugin process's own environment.
	PluginEnv map[string]string
	// CancelGrace is how long a job cancelled by an operator or the
	// customer, or out of time, gives its plugin to stop once interrupted
	// (protocol 1.3: SIGINT, the SDK cancels the operation) before its
	// process group is killed; Terraform uses it to save its state and
	// release its lock. Zero kills at once. A lost lease or a stopping
	// agent always kills at once.
	CancelGrace time.Duration
	// LogRoot, when set, keeps a local copy of the newest jobs' logs
	// (KeepJobLogs of them, STATE/logs/<job>-<attempt>.log, 0600), as
	// redacted as what imsd gets, for the customer's support bundle.
	LogRoot string
	// Credentials, when set, gives each job the cloud credentials of its
	// permission mode's role (the install stack's, agentd/stack): env is
	// added to the operation's environment only (never the plugin
	// process's own), secret lists values to redact from everything the
	// job sends back. An error fails the job before anything starts, with
	// the error as its message (naming the role and the stack parameter
	// that turns it on).
	Credentials func(ctx context.Context, job Job) (env map[string]string, secret []string, err error)
	// CgroupRoot is where cgroup file systems are mounted, for sweeping
	// step cgroups (/sys/fs/cgroup when empty).
	CgroupRoot string
	// Logger receives what the sweep after each job removed and its
	// errors. Nil discards them.
	Logger *slog.Logger
	// Kubeconfig is the path of the kubeconfig of the customer's cluster
	// (agentd --kubeconfig), given to jobs of the helm type only, as
	// KUBECONFIG. Empty: the helm type uses the in-cluster config of the
	// agent's pod.
	Kubeconfig string
	// PolicyDir holds the customer's policies (*.rego, agentd
	// --policy-dir), read again for each plan, apply and destroy and
	// handed to the plugin with the vendor's (CustomerPolicies). Empty:
	// none.
	PolicyDir string

	// SandboxReadOnly are host paths the customer lets every plugin read
	// in its sandbox (agentd --sandbox-read-only), such as a chart
	// directory or an OCI layout named by path in development.
	SandboxReadOnly []string
	// SandboxWritable are host directories the customer lets every
	// plugin write in its sandbox (agentd --sandbox-writable).
	SandboxWritable []string
	// SandboxHidden are the agent's own paths (its state directory, the
	// secrets file, the stack config and its value files, the policy
	// dir) kept from every plugin even where they lie inside a
	// directory the sandbox shows, such as /etc.
	SandboxHidden []string

	// journal, when set (SetJournal: the agent does), records events of
	// the agent's own in its audit journal: a job's refused egress.
	journal func(kind, subject string, data map[string]string)

	// mu guards active and lock, and is held through a workspace sweep.
	mu sync.Mutex
	// active holds the workspaces of the jobs running now.
	active map[string]bool
	// lock is WorkRoot's lock file, held once a sweep took it.
	lock *os.File
}

// SetJournal makes the runner record events of its own (a job's refused
// connections) in the agent's journal through note.
func (r *PluginRunner) SetJournal(note func(kind, subject string, data map[string]string)) {
	r.journal = note
}

// EgressRefusedKind is the journal record of a job whose plugin's
// connections the egress proxy refused: one per job, when its plugin
// ends, summing them all up.
const EgressRefusedKind = "egress.refused"

// registryWriters are the component types that write into the install
// registry (they sync artifacts into it); the others only read it.
var registryWriters = map[string]bool{"image": true}

// sandboxPaths are the host paths a plugin of type typ sees in its
// sandbox besides its workspace and socket dir (pluginhost.Loader's
// Sandbox): its component's state directory, writable; an install
// registry that is an OCI layout on this machine, writable for the
// types that sync into it and read-only for the others; the Terraform
// provider mirror read-only for every type (terraform reads it, and it
// holds nothing of the customer's); the kubeconfig, read-only, for helm
// only; and the customer's SandboxReadOnly and SandboxWritable paths. Nothing else of the
// agent's files: not its state directory (identity, controls, audit,
// other components' directories, other jobs' workspaces), not the
// secrets file or the stack config. hidden are SandboxHidden and, for
// any type but helm, the kubeconfig: kept from the plugin even where
// they lie inside a directory it sees.
func (r *PluginRunner) sandboxPaths(typ, stateDir string) (writable, readOnly, hidden []string) {
	if stateDir != "" {
		writable = append(writable, stateDir)
	}
	if loc, ok := strings.CutPrefix(r.InstallRegistry, "oci:"); ok && loc != "" {
		if err := os.MkdirAll(loc, 0o700); err == nil {
			if registryWriters[typ] {
				writable = append(writable, loc)
			} else {
				readOnly = append(readOnly, loc)
			}
		}
	}
	if dir := r.PluginEnv["BYOC_TERRAFORM_PROVIDERS"]; dir != "" {
		readOnly = append(readOnly, dir)
	}
	if r.Kubeconfig != "" && typ == KubeconfigType {
		readOnly = append(readOnly, r.Kubeconfig)
	}
	readOnly = append(readOnly, r.SandboxReadOnly...)
	writable = append(writable, r.SandboxWritable...)
	hidden = r.SandboxHidden
	if r.Kubeconfig != "" && typ != KubeconfigType {
		hidden = append(slices.Clone(hidden), r.Kubeconfig)
	}
	return writable, readOnly, hidden
}

// KubeconfigType is the component type whose jobs get the agent's
// kubeconfig (PluginRunner.Kubeconfig).
const KubeconfigType = "helm"

// InstallRegistryEnv names the install registry's location in every
// plugin's environment, and prefixes its credentials' secret names.
const InstallRegistryEnv = "BYOC_INSTALL_REGISTRY"

// runOp runs an operation of a started plugin. When ctx ends for a reason
// that allows it (an operator's or the customer's cancel, the job's
// timeout) and the plugin can be interrupted, it interrupts the plugin
// and waits up to CancelGrace for the operation to return before it
// kills the plugin; a lost lease or a stopping agent (ctx's other causes,
// job.Kill) kills it at once.
func (r *PluginRunner) runOp(ctx context.Context, inst *pluginhost.Instance, job Job, op string, req *sdk.RunRequest,
	onLog func(sdk.LogEvent), log func(int32, string)) (*sdk.Result, error) {
	if res, ok := hostDestroyPlan(inst, job, op); ok {
		return res, nil
	}
	if r.CancelGrace <= 0 || !inst.CanInterrupt() {
		return inst.Run(ctx, op, req, onLog)
	}
	runCtx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-job.Kill:
			stop(errors.New("the job was given up"))
			return
		case <-ctx.Done():
		}
		cause := context.Cause(ctx)
		var c cancelled
		if !errors.As(cause, &c) && !errors.Is(cause, errTimedOut) {
			stop(cause)
			return
		}
		log(StreamSystem, fmt.Sprintf("[agentd] %v: interrupting the plugin; waiting up to %s for it to stop", cause, r.CancelGrace))
		inst.Interrupt()
		t := time.NewTimer(r.CancelGrace)
		defer t.Stop()
		select {
		case <-done:
		case <-job.Kill:
			stop(errors.New("the job was given up"))
		case <-t.C:
			log(StreamSystem, fmt.Sprintf("[agentd] the plugin did not stop within %s; killing it", r.CancelGrace))
			stop(cause)
		}
	}()
	return inst.Run(runCtx, op, req, onLog)
}

// hostDestroyPlan is the plan of a destroy the agent makes itself for a
// plugin that does not plan destroys (no sdk.CapPlanDestroy): one change
// deleting the component, so that an operator approves a destroy by
// name, never an empty plan. ok is false when the plugin plans it.
func hostDestroyPlan(inst *pluginhost.Instance, job Job, op string) (*sdk.Result, bool) {
	d := inst.Description()
	if op != sdk.OpPlanDestroy || d.Has(sdk.CapPlanDestroy) {
		return nil, false
	}
	if !d.Has(sdk.CapDestroy) {
		return &sdk.Result{ExitCode: -1, Error: fmt.Sprintf("type %s cannot destroy (its capabilities: %s)", d.Type, strings.Join(d.Capabilities, ", "))}, true
	}
	address := cmp.Or(job.Component, job.ComponentType)
	return &sdk.Result{Changes: "destroy " + address, PlannedChanges: []sdk.PlannedChange{{Address: address, Action: sdk.ActionDelete,
		Summary: fmt.Sprintf("destroy component %s (type %s %s, which does not list what it removes)", address, d.Type, d.Version)}}}, true
}

// planOp is the plan operation that checks an approved plan before op:
// the plan of a destroy before a destroy, else a plan.
func planOp(op string) string {
	if op == sdk.OpDestroy {
		return sdk.OpPlanDestroy
	}
	return sdk.OpPlan
}

// SecretsKey is the top-level config key, for every component type, that
// lists the secrets a job receives. The agent resolves and removes it
// before the plugin sees the config.
const SecretsKey = jobconfig.SecretsKey

// redactHold bounds how long a log line that ends like the start of a
// secret is held back waiting for the next event of its stream.
const redactHold = 100 * time.Millisecond

// Run implements Runner.
func (r *PluginRunner) Run(ctx context.Context, job Job, rawLog func(int32, string)) Outcome {
	if err := checkJobID(job.ID); err != nil {
		// The agent refuses such an assignment; a runner used on its own
		// refuses it too, before the id names a directory.
		if rawLog != nil {
			rawLog(StreamSystem, "[agentd] "+err.Error())
		}
		return Outcome{Outcome: agentv1.Outcome_OUTCOME_FAILED, ExitCode: -1, Error: err.Error()}
	}
	secretValues := make([]string, 0, len(r.Secrets)+len(r.Redact))
	for _, v := range r.Secrets {
		secretValues = append(secretValues, v)
	}
	secretValues = append(secretValues, r.Redact...)
	// Values imsd marks sensitive (sensitive inputs) are redacted like
	// secrets; the list never reaches the plugin.
	config, sensitive, sensErr := jobconfig.TakeSensitive(job.Config)
	job.Config = config
	// The job's role's credentials, asked for before anything starts; a
	// mode without a role fails the job here.
	var credEnv map[string]string
	if r.Credentials != nil && sensErr == nil {
		env, secret, err := r.Credentials(ctx, job)
		if err != nil {
			sensErr = err
		}
		credEnv = env
		sensitive = append(sensitive, secret...)
	}
	// A job that carried a registry grant exchanges it now, right before
	// its plugin runs (after everything else that may fail it); the token is redacted like a secret.
	var regEnv map[string]string
	if job.Registry != nil && sensErr == nil {
		acc, err := job.Registry(ctx)
		if err != nil {
			sensErr = fmt.Errorf("vendor registry access: %w", err)
		} else {
			regEnv = acc.Env()
			secretValues = append(secretValues, acc.Token)
		}
	}
	job.registryEnv = regEnv
	red := redact.New(append(secretValues, sensitive...)...)
	// Every line goes through the redactor, so that a secret a plugin
	// sends in pieces is caught too; flushed before the outcome.
	jl := openJobLog(r.LogRoot, job)
	defer jl.close(r.LogRoot)
	stream := red.NewStream(redactHold, func(e redact.Event) { jl.write(e.Stream, e.Text); rawLog(e.Stream, e.Text) })
	log := func(st int32, text string) { stream.Add(redact.Event{Stream: st, Text: text}) }
	var verified []ArtifactVerification
	out := r.run(ctx, job, sensErr, credEnv, log, red, &verified)
	// What the supply-chain policy verified goes to imsd with any
	// outcome.
	for i := range verified {
		for j, f := range verified[i].Failed {
			verified[i].Failed[j] = red.String(f)
		}
	}
	out.Verifications = verified
	stream.Flush()
	out.Error = red.String(out.Error)
	out.Outputs = red.Map(out.Outputs)
	for _, f := range out.PolicyFindings {
		f.Policy, f.Message = red.String(f.Policy), red.String(f.Message)
	}
	// What a plugin killed mid-job may have left (its step cgroups) goes
	// now, not at the next restart.
	swept, err := r.Sweep()
	if r.Logger != nil {
		if !swept.Empty() {
			r.Logger.Info("removed leftovers after job", "job", job.ID, "workspaces", swept.Workspaces, "socket_dirs", swept.SocketDirs, "cgroups", swept.Cgroups)
		}
		if err != nil {
			r.Logger.Warn("sweep leftovers after job", "job", job.ID, "err", err)
		}
	}
	return out
}

// changedKeys lists the top-level keys whose values differ between two
// objects, sorted; nil unless both are objects.
func changedKeys(before, after any) []string {
	b, ok1 := before.(map[string]any)
	a, ok2 := after.(map[string]any)
	if !ok1 || !ok2 {
		return nil
	}
	var keys []string
	for k, v := range a {
		if w, ok := b[k]; !ok || !reflect.DeepEqual(v, w) {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// SensitiveKey is the top-level config key that lists values to redact
// from everything the job sends back (imsd puts the values of sensitive
// inputs there). The agent removes it before the plugin sees the config.
const SensitiveKey = jobconfig.SensitiveKey

// CustomerInputsKey is the top-level config key that lists the
// customer-provided inputs a job's config refers to.
const CustomerInputsKey = jobconfig.CustomerInputsKey

// sources are what a job's config is filled in from (jobconfig).
func (r *PluginRunner) sources() jobconfig.Sources {
	return jobconfig.Sources{Secrets: r.Secrets, Inputs: r.Inputs, SecretsOrigin: "its --secrets-file",
		MissingInput: func(name string) error {
			return fmt.Errorf("customer input %q is not set in this install's stack (its parameter %s; an agent run without --stack-config has none)",
				name, "Input"+stackconfig.Pascal(name))
		}}
}

// run runs job; configErr, when set, fails it before anything starts;
// credEnv goes to the operation's environment.
// What the customer's supply-chain policy verified is put in
// verifiedOut.
func (r *PluginRunner) run(ctx context.Context, job Job, configErr error, credEnv map[string]string, log func(int32, string), red *redact.Redactor, verifiedOut *[]ArtifactVerification) Outcome {
	begun := time.Now().UTC()
	fail := func(format string, args ...any) Outcome {
		msg := red.String(fmt.Sprintf(format, args...))
		log(StreamSystem, "[agentd] "+msg)
		return Outcome{Outcome: agentv1.Outcome_OUTCOME_FAILED, ExitCode: -1, Error: msg}
	}
	if configErr != nil {
		return fail("%v", configErr)
	}
	// The customer's inputs are filled in, the vendor's policies taken
	// out (their text is not the plugin's config) and the secrets
	// resolved, as sdktest does (jobconfig).
	prepared, err := jobconfig.Resolve(job.Config, r.sources())
	if err != nil {
		return fail("%v", err)
	}
	config, secretEnv := prepared.Config, prepared.SecretEnv
	switch {
	case job.Operation == sdk.OpImport && prepared.ImportID == "":
		return fail("an import job carries no import id (config.%s)", jobconfig.ImportIDKey)
	case job.Operation != sdk.OpImport && prepared.ImportID != "":
		return fail("a %s job carries an import id; only an import can", job.Operation)
	case job.Operation == sdk.OpImport && job.Component == "":
		return fail("an import job needs a component: the imported resource becomes its state")
	}
	var policies []sdk.PolicyModule
	if slices.Contains(policyOps, job.Operation) {
		// The customer's first: what a customer configured is evaluated
		// whatever the vendor's say (plugins/policy keeps them apart).
		if policies, err = CustomerPolicies(r.PolicyDir); err != nil {
			return fail("%v", err)
		}
		for _, p := range prepared.Policies {
			policies = append(policies, sdk.PolicyModule{Name: p.Name, Source: sdk.PolicySourceVendor, Rego: p.Rego})
		}
	}
	job.Config = config
	job.credEnv = credEnv
	// The customer's supply-chain policy, before anything of the job's
	// plugin runs.
	verified, err := r.checkSupplyChain(ctx, job, config, log)
	*verifiedOut = verified
	if err != nil {
		return fail("%v", err)
	}
	work := filepath.Join(r.WorkRoot, fmt.Sprintf("%s-%d", job.ID, job.Attempt))
	// In use from here, before it exists, so a sweep never takes it.
	r.enter(work)
	defer r.leave(work)
	// A previous agent process may have left this attempt's workspace.
	if err := os.RemoveAll(work); err != nil {
		return fail("clear workspace: %v", err)
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return fail("create workspace: %v", err)
	}
	defer os.RemoveAll(work)

	// The component's state directory, held until the plugin and all its
	// processes are gone (the deferred Kill below runs first).
	stateDir := ""
	if job.Component != "" && r.StateRoot != "" {
		st, err := r.acquireState(ctx, job, log)
		if err != nil {
			if ctx.Err() != nil {
				// The agent reports why the job ended; the log says
				// what it was waiting for.
				log(StreamSystem, "[agentd] "+red.String(err.Error()))
				return Outcome{}
			}
			return fail("%v", err)
		}
		defer st.release()
		stateDir = st.dir
	}

	// The plugin and what it runs see this environment and nothing of the
	// agent's own: no inherited cloud credentials.
	env := map[string]string{
		"PATH":            "/usr/local/bin:/usr/bin:/bin",
		"HOME":            work,
		"TMPDIR":          work,
		"LANG":            "C.UTF-8",
		"BYOC_JOB_ID":     job.ID,
		"BYOC_INSTALL_ID": job.InstallID,
		"BYOC_ATTEMPT":    fmt.Sprint(job.Attempt),
		"BYOC_OPERATION":  job.Operation,
	}
	if stateDir != "" {
		env["BYOC_STATE_DIR"] = stateDir
	}
	if r.InstallRegistry != "" {
		env[InstallRegistryEnv] = r.InstallRegistry
	}
	for k, v := range r.PluginEnv {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	// The proxy the sandbox's network leads to, for the plugin and every
	// operation (terraform, its providers, helm, an action's steps).
	maps.Copy(env, r.Loader.EgressEnv())
	if r.Kubeconfig != "" && job.ComponentType == KubeconfigType {
		env["KUBECONFIG"] = r.Kubeconfig
	} else if job.ComponentType == KubeconfigType {
		// The in-cluster config of the agent's pod is found from these
		// two variables (and the pod's service account files).
		for _, k := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
			if v, ok := os.LookupEnv(k); ok {
				env[k] = v
			}
		}
	}
	started := time.Now()
	// What the plugin prints outside the protocol (fmt.Println debugging,
	// a panic's stacks, anything before Serve) goes to the job's log on
	// the system stream, through the redactor like every line.
	output := func(source, text string) { log(StreamSystem, "[plugin "+source+"] "+text) }
	writable, readOnly, hidden := r.sandboxPaths(job.ComponentType, stateDir)
	opts := pluginhost.StartOptions{WorkDir: work, Env: env, Output: output,
		Writable: writable, ReadOnly: readOnly, Hidden: hidden,
		// The plugin waits for a frozen agent as long as the agent's
		// lease on the job lasts, and stops its work then.
		Lease: job.Lease,
		// Each distinct refused destination once; the plugin's end sums
		// them all up, in the log and the agent's journal.
		OnEgressDenied: func(d egress.Denial) {
			log(StreamSystem, "[agentd] egress: connection refused: "+d.String())
		}}
	if job.ComponentType == "action" {
		// The action type runs its steps under cgroup limits; inside the
		// plugin's sandbox it can only use a cgroup the agent delegates.
		opts.DelegateCgroup = fmt.Sprintf("%s-%d", job.ID, job.Attempt)
	}
	inst, err := r.Loader.Start(ctx, job.ComponentType, opts)
	if err != nil {
		return fail("%v", err) // "start plugin TYPE: …"
	}
	defer func() {
		inst.Kill()
		if s := inst.EgressRefused(); s != "" {
			log(StreamSystem, "[agentd] egress: "+s)
			if r.journal != nil {
				r.journal(EgressRefusedKind, job.ID, map[string]string{"attempt": fmt.Sprint(job.Attempt),
					"component": job.Component, "type": job.ComponentType, "refused": s})
			}
		}
	}()
	d := inst.Description()
	sandboxed := "no sandbox"
	if sb := r.Loader.Sandbox; sb != nil {
		sandboxed = "sandbox " + string(sb.Isolation)
	}
	if inst.Reattached() {
		sandboxed = "DEBUG MODE: reattached through " + sdk.ReattachEnv + ", not pinned, no sandbox"
	}
	log(StreamSystem, fmt.Sprintf("[agentd] %s %s: attempt %d, plugin %s %s started in %s (pid group %d, protocol %s, %s)",
		job.ComponentType, job.Operation, job.Attempt, d.Type, d.Version, time.Since(started).Round(time.Millisecond), inst.PGID(), d.Negotiated, sandboxed))
	evaluates := d.Has(sdk.CapPolicy) && !d.Negotiated.Less(sdk.ProtocolVersion{Major: 1, Minor: 3})
	if len(policies) > 0 {
		var names []string
		for _, p := range policies {
			names = append(names, p.Source+" "+p.Name)
		}
		if evaluates {
			log(StreamSystem, fmt.Sprintf("[agentd] policies: %s", strings.Join(names, ", ")))
		} else {
			log(StreamSystem, fmt.Sprintf("[agentd] policies NOT evaluated: type %q does not evaluate policies (%s)", job.ComponentType, strings.Join(names, ", ")))
		}
	}

	v, err := inst.Validate(ctx, job.Config)
	if err != nil {
		if ctx.Err() != nil {
			return Outcome{}
		}
		return fail("validate config: %v", err)
	}
	// Warnings are said in the log; errors fail the job.
	var errs []string
	for _, d := range v.Diagnostics {
		text := fmt.Sprintf("config.%s: %s", d.Field, d.Message)
		if d.Hint != "" {
			text += " (" + d.Hint + ")"
		}
		if d.IsWarning() {
			log(StreamSystem, "[agentd] warning: "+text)
			continue
		}
		errs = append(errs, text)
	}
	if len(errs) > 0 {
		return fail("invalid %s config: %s", job.ComponentType, strings.Join(errs, "; "))
	}
	// Secrets go to the operation only, never into the plugin process's
	// own environment.
	opEnv := maps.Clone(env)
	for _, suffix := range []string{"_USERNAME", "_PASSWORD", "_TOKEN"} {
		if v, ok := r.Secrets[InstallRegistryEnv+suffix]; ok {
			opEnv[InstallRegistryEnv+suffix] = v
		}
	}
	if p := r.OperationSecretsPrefix; p != "" {
		for k, v := range r.Secrets {
			if strings.HasPrefix(k, p) {
				opEnv[k] = v
			}
		}
	}
	maps.Copy(opEnv, secretEnv)
	maps.Copy(opEnv, job.registryEnv)
	maps.Copy(opEnv, credEnv)
	if arn := credEnv["BYOC_ROLE_ARN"]; arn != "" {
		log(StreamSystem, fmt.Sprintf("[agentd] %s mode: running with role %s (credentials until %s; never the agent's own)", job.Mode, arn, credEnv["AWS_CREDENTIAL_EXPIRATION"]))
	}
	jc := sdk.JobContext{JobID: job.ID, InstallID: job.InstallID, Attempt: int(job.Attempt), WorkDir: work,
		StateDir: stateDir, Timeout: job.Timeout, Component: job.Component, Mode: job.Mode, Policies: policies}
	plans, err := openPlans(stateDir)
	if err != nil {
		return fail("component state: %v", err)
	}
	defer plans.close()
	var out Outcome
	switch {
	case job.ApprovedPlanDigest != "" && (job.Operation == sdk.OpApply || job.Operation == sdk.OpDestroy):
		// The operator approved a plan: plan again, in this job and under
		// the same state-dir lock, and apply (or destroy) only if nothing
		// changed.
		fresh, ok, failed := r.replan(ctx, inst, job, jc, opEnv, plans, log, red)
		if !ok {
			return failed
		}
		out.PlanDigest = fresh
		jc.ApprovedPlanDigest = job.ApprovedPlanDigest
		jc.PlanDir = plans.dir(job.ApprovedPlanDigest)
	case job.ApprovedPlanDigest != "":
		return fail("a %s job carries an approved plan digest; only an apply or a destroy can", job.Operation)
	case sdk.IsPlan(job.Operation) && plans.root != "":
		if jc.PlanDir, err = plans.fresh(job, func(s string) { log(StreamSystem, "[agentd] "+s) }); err != nil {
			return fail("plan directory: %v", err)
		}
	}
	if jc.PlanDir != "" {
		opEnv["BYOC_PLAN_DIR"] = jc.PlanDir
	}
	if jc.ApprovedPlanDigest != "" {
		opEnv["BYOC_APPROVED_PLAN_DIGEST"] = jc.ApprovedPlanDigest
	}
	if job.Operation == sdk.OpImport {
		log(StreamSystem, fmt.Sprintf("[agentd] importing %q as component %s (type %s)", prepared.ImportID, job.Component, job.ComponentType))
	}
	res, err := r.runOp(ctx, inst, job, job.Operation, &sdk.RunRequest{Job: jc, Config: job.Config, Env: opEnv, ImportID: prepared.ImportID},
		func(e sdk.LogEvent) { log(int32(e.Stream), e.Text) }, log)
	if job.Operation == sdk.OpApply || job.Operation == sdk.OpDestroy || job.Operation == sdk.OpImport {
		// The component's state moved on (or may have): every saved plan
		// of it is stale.
		if err := plans.clear(); err != nil {
			log(StreamSystem, "[agentd] remove stale plans: "+red.String(err.Error()))
		}
	}
	if ctx.Err() != nil {
		plans.discard(jc.PlanDir)
		return Outcome{} // the agent reports the cause
	}
	if err != nil {
		plans.discard(jc.PlanDir)
		return fail("%v", err)
	}
	// A plan's or drift check's verdict and summary reach the operator in
	// the job log too, beside the result's planned changes.
	if job.Operation == sdk.OpDrift && res.Error == "" {
		verdict := "no drift"
		if res.Drifted {
			verdict = "drifted"
		}
		log(StreamSystem, "[agentd] drift check: "+verdict)
	}
	logChanges(job.Operation, res, log)
	out.Outcome, out.ExitCode, out.Outputs = agentv1.Outcome_OUTCOME_SUCCEEDED, int32(res.ExitCode), res.Outputs
	out.PolicyFindings, out.Drifted = findingsToProto(res.PolicyFindings), res.Drifted
	if sdk.IsPlan(job.Operation) || job.Operation == sdk.OpDrift || len(res.PlannedChanges) > 0 {
		if out.PlannedChanges, out.PlanDigest, err = redactedPlan(res.PlannedChanges, red); err != nil {
			plans.discard(jc.PlanDir)
			return fail("%v", err)
		}
	}
	if res.Error == "" && res.ExitCode == 0 && hasDeny(res.PolicyFindings) {
		// A plugin that reports a denial yet succeeds has a bug; the job
		// still must not count as done.
		res.Error = "the plugin reported a policy denial but did not fail the " + job.Operation
	}
	if res.Error != "" || res.ExitCode != 0 {
		out.Outcome = agentv1.Outcome_OUTCOME_FAILED
		out.Error = res.Error
		if out.Error == "" {
			out.Error = fmt.Sprintf("exit code %d", res.ExitCode)
		}
	}
	if out.Outcome == agentv1.Outcome_OUTCOME_SUCCEEDED {
		// A build is signed in the vendor registry before it counts as
		// done: an unsigned one would be refused by installs that
		// require signatures.
		if out.Outputs == nil {
			out.Outputs = map[string]string{}
		}
		if err := r.signBuild(ctx, job, out.Outputs, begun, log); err != nil {
			return fail("%v", err)
		}
	}
	if sdk.IsPlan(job.Operation) {
		if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
			plans.discard(jc.PlanDir)
		} else if err := plans.keep(jc.PlanDir, out.PlanDigest); err != nil {
			return fail("keep the plan's artifact: %v", err)
		} else if jc.PlanDir != "" {
			log(StreamSystem, "[agentd] plan "+out.PlanDigest+" saved in "+plans.dir(out.PlanDigest))
		}
	}
	return out
}

// logChanges writes a plan's or drift check's summary and changes into
// the job's log.
func logChanges(op string, res *sdk.Result, log func(int32, string)) {
	if changes := strings.TrimRight(res.Changes, "\n"); changes != "" {
		for _, line := range strings.Split(changes, "\n") {
			log(StreamSystem, "[agentd] changes: "+line)
		}
	}
	for _, c := range res.PlannedChanges {
		line := "[agentd] " + op + ": " + c.String()
		if keys := changedKeys(c.Before, c.After); len(keys) > 0 {
			line += " (changed: " + strings.Join(keys, ", ") + ")"
		}
		log(StreamSystem, line)
	}
}

// redactedPlan converts a plugin's planned changes for imsd, every string
// of them through the job's redactor, and returns their digest
// (agentproto.PlanDigest), computed over what imsd receives.
func redactedPlan(changes []sdk.PlannedChange, red *redact.Redactor) ([]*agentv1.PlannedChange, string, error) {
	var out []*agentv1.PlannedChange
	for _, c := range changes {
		pc := &agentv1.PlannedChange{Address: red.String(c.Address), Action: c.Action, Summary: red.String(c.Summary)}
		// The values came from protobuf, so they convert back.
		if c.Before != nil {
			pc.Before, _ = structpb.NewValue(red.Value(c.Before))
		}
		if c.After != nil {
			pc.After, _ = structpb.NewValue(red.Value(c.After))
		}
		out = append(out, pc)
	}
	digest, err := PlanDigest(out)
	if err != nil {
		return nil, "", err
	}
	return out, digest, nil
}

// PlanDigest is agentproto.PlanDigest of changes as the agent sends them.
func PlanDigest(changes []*agentv1.PlannedChange) (string, error) {
	in := make([]agentproto.PlanChange, len(changes))
	for i, c := range changes {
		in[i] = agentproto.PlanChange{Address: c.GetAddress(), Action: c.GetAction(), Summary: c.GetSummary()}
		if c.Before != nil {
			in[i].Before = c.Before.AsInterface()
		}
		if c.After != nil {
			in[i].After = c.After.AsInterface()
		}
	}
	return agentproto.PlanDigest(in)
}

// replan makes a fresh plan before the apply of an approved one. ok is
// true when its digest is the approved one; then the approved plan's
// artifact directory holds the saved plan (the fresh one's, if the
// approved one's is gone). Otherwise failed is the job's outcome: the
// fresh plan, kept under its own digest, and an error saying that the
// plan changed and nothing was applied.
func (r *PluginRunner) replan(ctx context.Context, inst *pluginhost.Instance, job Job, jc sdk.JobContext, env map[string]string,
	plans planStore, log func(int32, string), red *redact.Redactor) (fresh string, ok bool, failed Outcome) {
	fail := func(format string, args ...any) Outcome {
		msg := red.String(fmt.Sprintf(format, args...))
		log(StreamSystem, "[agentd] "+msg)
		return Outcome{Outcome: agentv1.Outcome_OUTCOME_FAILED, ExitCode: -1, Error: msg}
	}
	if _, valid := agentproto.PlanDigestHex(job.ApprovedPlanDigest); !valid {
		return "", false, fail("approved plan digest %q: want sha256: and 64 lowercase hex digits", job.ApprovedPlanDigest)
	}
	verb, done, op := "applying", "applied", "apply"
	if job.Operation == sdk.OpDestroy {
		verb, done, op = "destroying", "destroyed", "destroy"
	}
	log(StreamSystem, "[agentd] the operator approved plan "+job.ApprovedPlanDigest+"; planning again before "+verb)
	var err error
	if plans.root != "" {
		if jc.PlanDir, err = plans.fresh(job, func(s string) { log(StreamSystem, "[agentd] "+s) }); err != nil {
			return "", false, fail("plan directory: %v", err)
		}
	}
	planEnv := maps.Clone(env)
	if jc.PlanDir != "" {
		planEnv["BYOC_PLAN_DIR"] = jc.PlanDir
	}
	var res *sdk.Result
	var err2 error
	if hp, ok := hostDestroyPlan(inst, job, planOp(job.Operation)); ok {
		res = hp
	} else {
		res, err2 = inst.Run(ctx, planOp(job.Operation), &sdk.RunRequest{Job: jc, Config: job.Config, Env: planEnv},
			func(e sdk.LogEvent) { log(int32(e.Stream), e.Text) })
	}
	err = err2
	if err == nil && res.Error == "" && res.ExitCode != 0 {
		res.Error = fmt.Sprintf("exit code %d", res.ExitCode)
	}
	if err != nil || res.Error != "" || ctx.Err() != nil {
		plans.discard(jc.PlanDir)
		if ctx.Err() != nil {
			return "", false, Outcome{}
		}
		if err == nil {
			err = errors.New(res.Error)
		}
		return "", false, fail("plan before %s failed, nothing was %s: %v", op, done, err)
	}
	logChanges(planOp(job.Operation), res, log)
	changes, digest, err := redactedPlan(res.PlannedChanges, red)
	if err != nil {
		plans.discard(jc.PlanDir)
		return "", false, fail("plan before %s: %v", op, err)
	}
	if digest != job.ApprovedPlanDigest {
		if err := plans.keep(jc.PlanDir, digest); err != nil {
			log(StreamSystem, "[agentd] keep the fresh plan's artifact: "+red.String(err.Error()))
		}
		out := fail("plan changed since approval: approved %s, the plan now is %s (%d changes); nothing was %s, approve the new plan to %s it",
			job.ApprovedPlanDigest, digest, len(changes), done, op)
		out.PlannedChanges, out.PlanDigest = changes, digest
		return digest, false, out
	}
	if err := plans.adopt(jc.PlanDir, digest); err != nil {
		return "", false, fail("keep the plan's artifact: %v", err)
	}
	log(StreamSystem, "[agentd] the plan is the approved one ("+digest+"); applying")
	return digest, true, Outcome{}
}
