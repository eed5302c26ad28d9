package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Offline jobs: the jobs of a bundle (agentd bundle import), which come
// from a file, not a stream. Each is checked as an assignment is (imsd's
// signature for this agent and install, under the keys pinned at
// enrolment, not expired, never run before) and runs through the same
// checks and runner an assignment's attempt does (the customer's
// permission modes, maintenance windows, policies, supply-chain policy,
// sandbox, plugin subprocess), with its audit records in the agent's
// journal. There is no lease: nobody else holds the job.

// Journal record kinds of offline jobs.
const (
	KindBundleJobStarted  = "bundle.job.started"
	KindBundleJobFinished = "bundle.job.finished"
	KindBundleJobRefused  = "bundle.job.refused"
)

// IMSDKeys returns the imsd keys the agent trusts, by id.
func (a *Agent) IMSDKeys() map[string]ed25519.PublicKey { return maps.Clone(a.keys) }

// ErrAlreadyRun is returned by RunOffline for a job the agent accepted
// before (from a stream or an earlier import).
var ErrAlreadyRun = errors.New("already run on this agent")

// OfflineJob is one job of a bundle to run.
type OfflineJob struct {
	Bundle string
	Job    *agentproto.BundleJob
	// Outputs resolves the output references the job's config keeps
	// (agentproto.OutputRef) from the bundle's earlier jobs.
	Outputs func(component, output string) (string, bool)
	// VendorRegistry is where the job's vendor artifacts are (the
	// bundle's OCI image layout root, as oci:DIR), for the image type.
	VendorRegistry string
}

// OpenBundleJobs opens a bundle's sealed jobs (jobs.sealed), which imsd
// sealed to this agent's key: only the agent reads the install's
// sensitive values they carry.
func (a *Agent) OpenBundleJobs(sealed []byte) ([]byte, error) {
	b, err := agentchannel.OpenWith(a.privateKey(), agentproto.BundleJobsInfo(a.id.InstallID, a.id.AgentID), sealed)
	if err != nil {
		return nil, fmt.Errorf("jobs.sealed does not open with this agent's key (%w): a bundle is sealed to the key the agent had when it was made; after a key rotation, make it again", err)
	}
	return b, nil
}

// CheckOffline checks a bundle job's signature as an assignment's is
// checked, without running or recording anything.
func (a *Agent) CheckOffline(j *agentproto.BundleJob) error {
	if j.InstallID != a.id.InstallID {
		return fmt.Errorf("job %s (step %s) is for install %q and this agent belongs to install %q", j.JobID, j.Step, j.InstallID, a.id.InstallID)
	}
	if err := checkJobID(j.JobID); err != nil {
		return fmt.Errorf("step %s: %w", j.Step, err)
	}
	_, err := j.Verify(a.keys, a.id.AgentID, a.now())
	return err
}

// NewestJob is the job the agent accepted (from a stream or a bundle)
// that imsd made last, kept across restarts: agentd bundle import
// refuses a bundle imsd made before it.
func (a *Agent) NewestJob() Newest { return a.seen.latest() }

// Refusal says why the customer's controls refuse a job of mode now ("":
// they allow it), as they are checked right before a job runs.
func (a *Agent) Refusal(mode string) string { return a.refusal(mode) }

// RunOffline runs one bundle job to its end. An error is a refusal
// before anything ran (a bad signature, a replay); a job the customer's
// controls refuse ends with outcome REFUSED.
func (a *Agent) RunOffline(ctx context.Context, oj OfflineJob, logf func(stream int32, text string)) (Outcome, error) {
	j := oj.Job
	if err := a.CheckOffline(j); err != nil {
		a.note(KindBundleJobRefused, "job:"+j.JobID, map[string]string{"bundle": oj.Bundle, "step": j.Step, "reason": err.Error()})
		return Outcome{}, err
	}
	config, _ := j.DecodeConfig()
	data := map[string]string{"bundle": oj.Bundle, "step": j.Step, "mode": j.Mode, "type": j.ComponentType, "operation": j.Operation,
		"component": j.Component, "key": j.KeyID}
	if a.seen.has(j.JobID, j.Attempt) {
		return Outcome{}, fmt.Errorf("job %s (step %s): %w", j.JobID, j.Step, ErrAlreadyRun)
	}
	a.note(KindBundleJobStarted, "job:"+j.JobID, data)
	finish := func(out Outcome) Outcome {
		d := map[string]string{"bundle": oj.Bundle, "step": j.Step, "outcome": outcomeName(out.Outcome), "exit_code": itoa(int64(out.ExitCode))}
		if out.Error != "" {
			d["error"] = out.Error
		}
		a.note(KindBundleJobFinished, "job:"+j.JobID, d)
		return out
	}
	if why := a.refusal(j.Mode); why != "" {
		logf(StreamSystem, "[agentd] "+why)
		return finish(Outcome{Outcome: agentv1.Outcome_OUTCOME_REFUSED, ExitCode: -1, Error: why}), nil
	}
	if why, _ := a.windowRefusal(j.WindowBound); why != "" {
		logf(StreamSystem, "[agentd] "+why)
		return finish(Outcome{Outcome: agentv1.Outcome_OUTCOME_REFUSED, ExitCode: -1, Error: why}), nil
	}
	// Recorded only once it may run: a job the customer's controls
	// refused runs at a later import of the same bundle, once allowed.
	if err := a.seen.add(j.JobID, j.Attempt, time.UnixMilli(j.ExpireUnixMs), a.now()); err != nil {
		return Outcome{}, fmt.Errorf("cannot record job %s before running it: %w", j.JobID, err)
	}
	if oj.Outputs != nil {
		r, err := agentproto.RenderOutputs(config, oj.Outputs)
		if err != nil {
			msg := "render: config." + err.Error()
			logf(StreamSystem, "[agentd] "+msg)
			return finish(Outcome{Outcome: agentv1.Outcome_OUTCOME_FAILED, ExitCode: -1, Error: msg}), nil
		}
		config = r.(map[string]any)
	}
	timeout := time.Duration(j.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Hour
	}
	job := Job{ID: j.JobID, InstallID: j.InstallID, Attempt: int32(j.Attempt), ComponentType: j.ComponentType, Component: j.Component,
		Operation: j.Operation, Config: config, Timeout: timeout, Mode: j.Mode, WindowBound: j.WindowBound, SupplyChain: a.supplyChain}
	if oj.VendorRegistry != "" && j.ComponentType == agentproto.ImageType {
		loc := oj.VendorRegistry
		job.Registry = func(context.Context) (RegistryAccess, error) { return RegistryAccess{Host: loc}, nil }
	}
	jctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	defer cancel()
	a.log.Info("bundle job started", "job", j.JobID, "step", j.Step, "type", j.ComponentType, "operation", j.Operation)
	out := a.cfg.Runner.Run(jctx, job, logf)
	if errors.Is(context.Cause(jctx), errTimedOut) {
		out = Outcome{Outcome: agentv1.Outcome_OUTCOME_TIMED_OUT, ExitCode: -1,
			Error: fmt.Sprintf("timed out after %s; the plugin and its processes were stopped", timeout)}
	} else if ctx.Err() != nil {
		out = Outcome{Outcome: agentv1.Outcome_OUTCOME_CANCELLED, ExitCode: -1, Error: "cancelled: " + context.Cause(ctx).Error()}
	}
	return finish(out), nil
}

// OfflineArtifactRefusal is why the customer's supply-chain policy
// refuses the artifact bundle job j deploys (an image's source, a chart, a
// module), read from the bundle's layout root layout (oci:DIR) before it
// is loaded into the install registry, decided as the job's own check
// decides it for an apply: "" when that check would let it run (no
// policy, verified, warned only), or for a job that deploys none. It
// records nothing. agentd bundle import asks it for every artifact it
// would load: one the policy refuses is not loaded, as online an image's
// check runs before its copy, so nothing the install's cluster may pull
// from the install registry got there past the policy (a chart or module
// field may name any artifact, an image too). A plan, apply or import
// of it is refused, and journalled, in its turn.
func (a *Agent) OfflineArtifactRefusal(ctx context.Context, r *PluginRunner, j *agentproto.BundleJob, layout string) (string, error) {
	config, err := j.DecodeConfig()
	if err != nil {
		return "", err
	}
	// Checked as an apply's whatever the job's operation: the import
	// loads the artifact of a drift check too, and a job's operation
	// must not decide what enters the install registry unchecked.
	job := Job{ID: j.JobID, InstallID: j.InstallID, Attempt: int32(j.Attempt), ComponentType: j.ComponentType, Component: j.Component,
		Operation: sdk.OpApply, Config: config, Mode: j.Mode, SupplyChain: a.supplyChain,
		registryEnv: RegistryAccess{Host: layout}.Env(), artifactRegistry: layout}
	_, err = r.supplyChainVerdict(ctx, job, config, func(int32, string) {}, func(string, map[string]string) {})
	if err != nil {
		return err.Error(), nil
	}
	return "", nil
}

// outcomeName is an outcome's name without its prefix ("succeeded").
func outcomeName(o agentv1.Outcome) string {
	switch o {
	case agentv1.Outcome_OUTCOME_SUCCEEDED:
		return "succeeded"
	case agentv1.Outcome_OUTCOME_REFUSED:
		return "refused"
	case agentv1.Outcome_OUTCOME_CANCELLED:
		return "cancelled"
	case agentv1.Outcome_OUTCOME_TIMED_OUT:
		return "timed out"
	}
	return "failed"
}
