package operatorapi

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/registry"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Offline bundles: imsd signs the jobs of an install's workflow for its
// agent, and later the bundle's manifest; the CLI copies the artifacts
// and packs the file (tui/cli bundle.go, internal/bundlefile).

const (
	defaultBundleValidity = 30 * 24 * time.Hour
	maxBundleValidity     = agentproto.MaxBundleValidity
	// bundlePullTTL is how long the CLI's vendor registry pull token
	// lives: enough to copy the artifacts.
	bundlePullTTL = time.Hour
	// maxBundleManifest bounds a manifest imsd signs.
	maxBundleManifest = 2 << 20
)

// BundleJobsFile is a bundle's readable view of its jobs, and
// BundleSealedJobsFile the jobs themselves, sealed to the agent, as its
// manifest names them.
const (
	BundleJobsFile       = "jobs.json"
	BundleSealedJobsFile = "jobs.sealed"
)

// CreateBundle implements byoc bundle create.
func (s *Service) CreateBundle(ctx context.Context, req *connect.Request[imsv1.CreateBundleRequest]) (*connect.Response[imsv1.CreateBundleResponse], error) {
	m := req.Msg
	if s.cfg.SigningKey.Private == nil {
		return nil, s.err(ctx, errs.E(errs.Unavailable, "this imsd has no job signing key loaded"))
	}
	if f := s.cfg.SigningKeyFile; f != "" {
		k, err := auth.LoadSigningKey(f, false)
		if err != nil {
			return nil, s.err(ctx, errs.E(errs.Conflict, "this imsd cannot check that its job signing key %s is still the one in its key file: %v", s.cfg.SigningKey.ID, err))
		}
		if k.ID != s.cfg.SigningKey.ID {
			return nil, s.err(ctx, errs.E(errs.Conflict, "this imsd signs with key %s, and its key file %s holds key %s now (imsd key rotate ran): restart imsd to sign bundles with the new key (results of a bundle signed with the old key would import for %d days after the rotation only)",
				s.cfg.SigningKey.ID, f, k.ID, int(auth.PreviousKeyUse/(24*time.Hour))))
		}
	}
	valid := defaultBundleValidity
	if m.ValidSeconds != 0 {
		valid = time.Duration(m.ValidSeconds) * time.Second
		if valid <= 0 || valid > maxBundleValidity {
			return nil, s.err(ctx, errs.E(errs.Invalid, "valid_seconds: %d is outside 1 second to %s", m.ValidSeconds, maxBundleValidity))
		}
	}
	e, err := s.engine()
	if err != nil {
		return nil, s.err(ctx, err)
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	app, err := s.store.GetApp(ctx, in.AppID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if m.App != "" && m.App != app.Name && m.App != app.ID {
		return nil, s.err(ctx, errs.E(errs.Invalid, "app: install %s is an install of app %s, not %s", in.Name, app.Name, m.App))
	}
	agents, err := s.store.AgentsForInstall(ctx, in.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	agentID := ""
	var agentKey ed25519.PublicKey
	for _, a := range agents {
		if a.RevokedAt.IsZero() && !a.Build {
			agentID, agentKey = a.ID, ed25519.PublicKey(a.PublicKey)
			break
		}
	}
	if agentID == "" {
		return nil, s.err(ctx, errs.E(errs.Conflict, "install %s has no enrolled agent: a bundle's jobs are signed for the install's agent, so enrol it once (byoc install token %s) before creating a bundle", in.Name, in.Name))
	}
	kind, rev, steps, err := e.BundlePlan(ctx, in, m.Revision)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	now := s.now()
	expires := now.Add(valid)
	jobs := make([]agentproto.BundleJob, 0, len(steps))
	var repos []string
	for _, st := range steps {
		var cfg map[string]any
		if err := json.Unmarshal(st.Config, &cfg); err != nil {
			return nil, s.err(ctx, fmt.Errorf("step %s config: %w", st.Step.Name, err))
		}
		digest, err := agentproto.ConfigDigest(cfg)
		if err != nil {
			return nil, s.err(ctx, fmt.Errorf("step %s config: %w", st.Step.Name, err))
		}
		j := agentproto.BundleJob{Step: st.Step.Name, Needs: st.Step.Needs, JobID: auth.NewSortableID("job_", now), InstallID: in.ID,
			Attempt: 1, FencingToken: 1, Mode: string(st.Mode), Component: st.Step.Component, ComponentType: st.Step.ComponentType,
			Operation: st.Step.Operation, TimeoutSeconds: int64(st.Step.Timeout / time.Second), Config: st.Config}
		c := agentproto.JobClaims{InstallID: in.ID, AgentID: agentID, JobID: j.JobID, Attempt: j.Attempt, FencingToken: j.FencingToken,
			Mode: j.Mode, Component: j.Component, ComponentType: j.ComponentType, Operation: j.Operation,
			TimeoutSeconds: j.TimeoutSeconds, ConfigDigest: digest, Expires: expires}
		j.Signature = s.cfg.SigningKey.Sign(&c)
		j.KeyID, j.ExpireUnixMs = c.KeyID, c.Expires.UnixMilli()
		jobs = append(jobs, j)
		// The repositories the CLI copies from: images' sources, and
		// the charts and modules named by digest.
		if art, ok, err := j.Artifact(); err == nil && ok && !slices.Contains(repos, art.Repository) {
			repos = append(repos, art.Repository)
		}
	}
	// The jobs carry the install's sensitive values: sealed to the agent,
	// beside a view with each one masked (agentproto/bundlejobs.go).
	b, err := json.MarshalIndent(jobs, "", "  ")
	if err != nil {
		return nil, s.err(ctx, err)
	}
	sealed, err := agentchannel.SealTo(agentKey, agentproto.BundleJobsInfo(in.ID, agentID), b)
	if err != nil {
		return nil, s.err(ctx, fmt.Errorf("seal the jobs to agent %s: %w", agentID, err))
	}
	view, err := agentproto.BundleJobsView(jobs)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	vb, err := json.MarshalIndent(view, "", "  ")
	if err != nil {
		return nil, s.err(ctx, err)
	}
	vb = append(vb, '\n')
	// The agent's journal head imsd took last: its results file carries
	// the records after it only.
	jseq, jhash, _, err := s.lastImport(ctx, in.ID, agentID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	of := agentproto.BundleJobsOf{InstallID: in.ID, AgentID: agentID, BundleID: auth.NewSortableID("bdl_", now), Revision: rev, WorkflowKind: kind,
		JournalSeq: jseq, JournalHash: jhash}
	out := &imsv1.CreateBundleResponse{BundleId: of.BundleID, InstallId: in.ID, AgentId: agentID, Revision: rev,
		WorkflowKind: kind, JournalSeq: jseq, JournalHash: jhash, JobsJson: vb, JobsSealed: sealed, JobsSignature: agentproto.SignBundleJobs(s.cfg.SigningKey.Private, of, vb, sealed),
		Repositories: repos, SigningKeyId: s.cfg.SigningKey.ID,
		App: app.Name, Install: in.Name, ExpireUnixMs: expires.UnixMilli(), Registry: s.cfg.RegistryURL}
	if s.cfg.RegistryTokens != nil && len(repos) > 0 {
		scopes := make([]registry.Scope, 0, len(repos))
		for _, r := range repos {
			scopes = append(scopes, registry.Scope{Type: "repository", Name: r, Actions: []string{"pull"}})
		}
		tok, err := s.cfg.RegistryTokens.Mint("bundle:"+in.ID, scopes, now, bundlePullTTL)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		out.RegistryToken = tok.Token
	}
	return connect.NewResponse(out), nil
}

// bundleManifest is what SignBundle reads of a manifest: what it is, the
// bundle, install and agent it is for, and its files.
type bundleManifest struct {
	Kind         string `json:"kind"`
	ID           string `json:"id"`
	InstallID    string `json:"install_id"`
	AgentID      string `json:"agent_id"`
	Revision     int64  `json:"revision"`
	WorkflowKind string `json:"workflow_kind"`
	JournalSeq   int64  `json:"journal_seq"`
	JournalHash  string `json:"journal_hash"`
	Files        []struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	} `json:"files"`
}

// SignBundle implements the signing of byoc bundle create's manifest.
func (s *Service) SignBundle(ctx context.Context, req *connect.Request[imsv1.SignBundleRequest]) (*connect.Response[imsv1.SignBundleResponse], error) {
	m := req.Msg
	if s.cfg.SigningKey.Private == nil {
		return nil, s.err(ctx, errs.E(errs.Unavailable, "this imsd has no job signing key loaded"))
	}
	if len(m.Manifest) > maxBundleManifest {
		return nil, s.err(ctx, errs.E(errs.Invalid, "manifest: %d bytes, more than %d", len(m.Manifest), maxBundleManifest))
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	var man bundleManifest
	dec := json.NewDecoder(bytes.NewReader(m.Manifest))
	if err := dec.Decode(&man); err != nil {
		return nil, s.err(ctx, errs.E(errs.Invalid, "manifest: %v", err))
	}
	if man.InstallID != in.ID {
		return nil, s.err(ctx, errs.E(errs.Invalid, "manifest: install_id %q is not install %s (%s)", man.InstallID, in.Name, in.ID))
	}
	if man.Kind != bundlefile.KindBundle {
		return nil, s.err(ctx, errs.E(errs.Invalid, "manifest: kind %q, not %q", man.Kind, bundlefile.KindBundle))
	}
	if !agentproto.ValidBundleID(man.ID) {
		return nil, s.err(ctx, errs.E(errs.Invalid, "manifest: id %q is not a bundle id (CreateBundle's bundle_id)", man.ID))
	}
	// Only jobs imsd made itself, for this install and bundle (its id,
	// agent, revision and workflow kind, as CreateBundle made them): a
	// manifest signed here vouches for nothing imsd did not sign. The
	// sealed jobs cannot be read here (they are the agent's);
	// CreateBundle signed them with their view.
	of := agentproto.BundleJobsOf{InstallID: in.ID, AgentID: man.AgentID, BundleID: man.ID, Revision: man.Revision, WorkflowKind: man.WorkflowKind,
		JournalSeq: man.JournalSeq, JournalHash: man.JournalHash}
	if !agentproto.VerifyBundleJobs(s.cfg.SigningKey.Public, of, m.JobsJson, m.JobsSealed, m.JobsSignature) {
		return nil, s.err(ctx, errs.E(errs.Invalid, "jobs_signature: %s and %s are not the jobs this imsd made for bundle %s (agent %s, revision %d, %s) of install %s (byoc bundle create makes them)",
			BundleJobsFile, BundleSealedJobsFile, man.ID, man.AgentID, man.Revision, man.WorkflowKind, in.Name))
	}
	for name, b := range map[string][]byte{BundleJobsFile: m.JobsJson, BundleSealedJobsFile: m.JobsSealed} {
		sum := sha256.Sum256(b)
		listed := false
		for _, f := range man.Files {
			if f.Path == name {
				if f.SHA256 != hex.EncodeToString(sum[:]) {
					return nil, s.err(ctx, errs.E(errs.Invalid, "manifest: %s is listed with sha256 %s, and the file given has %x", name, f.SHA256, sum))
				}
				listed = true
			}
		}
		if !listed {
			return nil, s.err(ctx, errs.E(errs.Invalid, "manifest: lists no %s", name))
		}
	}
	sig := agentproto.SignBundleManifest(s.cfg.SigningKey.Private, m.Manifest)
	return connect.NewResponse(&imsv1.SignBundleResponse{KeyId: s.cfg.SigningKey.ID, Signature: sig}), nil
}
