package operatorapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/registry"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// MaxBuildArchiveBytes bounds a packaged directory: it travels in the
// build job's config (base64), under MaxConfigBytes.
const MaxBuildArchiveBytes = 180 << 10

// BuildJobTimeout is a build job's time limit.
const BuildJobTimeout = time.Hour

// CreateBuildAgentToken issues an enrolment token for the build agent.
func (s *Service) CreateBuildAgentToken(ctx context.Context, req *connect.Request[imsv1.CreateBuildAgentTokenRequest]) (*connect.Response[imsv1.CreateBuildAgentTokenResponse], error) {
	life, err := ttl("ttl_seconds", req.Msg.TtlSeconds)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	now := s.now()
	secret, hash := auth.NewEnrollToken(s.cfg.SigningKeyID)
	et := store.EnrollmentToken{Hash: hash, ExpiresAt: now.Add(life), CreatedAt: now}
	if err := s.store.CreateBuildAgentToken(ctx, et); err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.CreateBuildAgentTokenResponse{
		EnrollmentToken: &imsv1.EnrollmentToken{Token: secret, ExpireTime: timestamppb.New(et.ExpiresAt)},
	}), nil
}

// StartBuild queues a build job for the vendor's build agent.
func (s *Service) StartBuild(ctx context.Context, req *connect.Request[imsv1.StartBuildRequest]) (*connect.Response[imsv1.StartBuildResponse], error) {
	m := req.Msg
	cfg := map[string]any{"kind": m.Kind, "repository": m.Repository, "source": m.Source}
	switch m.Kind {
	case "sync":
		if m.Source == "" {
			return nil, s.err(ctx, errs.Field("source", "is required: the reference to sync (HOST/REPO:TAG or HOST/REPO@DIGEST)"))
		}
		if len(m.Archive) > 0 {
			return nil, s.err(ctx, errs.Field("archive", "must be empty for a sync"))
		}
	case "helm", "terraform":
		if len(m.Archive) == 0 {
			return nil, s.err(ctx, errs.Field("archive", "is required for a %s package: the directory as a gzipped tar", m.Kind))
		}
		if len(m.Archive) > MaxBuildArchiveBytes {
			return nil, s.err(ctx, errs.Field("archive", "is %d bytes; at most %d", len(m.Archive), MaxBuildArchiveBytes))
		}
		if m.Source == "" {
			return nil, s.err(ctx, errs.Field("source", "is required: a name for the packaged directory"))
		}
		cfg["archive"] = base64.StdEncoding.EncodeToString(m.Archive)
	default:
		return nil, s.err(ctx, errs.Field("kind", "must be sync, helm or terraform, got %q", m.Kind))
	}
	if !registry.ValidRepository(m.Repository) {
		return nil, s.err(ctx, errs.Field("repository", "%q is not a repository name (lowercase path components: acme/web)", m.Repository))
	}
	if m.Tag != "" {
		cfg["tag"] = m.Tag
	}
	if len(m.Source) > 1024 {
		return nil, s.err(ctx, errs.Field("source", "is longer than 1024 bytes"))
	}
	if _, err := s.store.GetInstall(ctx, store.VendorInstallID); errs.Is(err, errs.NotFound) {
		return nil, s.err(ctx, errs.E(errs.Conflict, "no build agent: create its token with byoc build agent-token and start agentd --role build"))
	}
	st, err := structpb.NewStruct(cfg)
	if err != nil {
		return nil, s.err(ctx, errs.Field("source", "%v", err))
	}
	j, err := s.newJob(ctx, &imsv1.EnqueueJobRequest{Install: store.VendorInstallID, ComponentType: store.BuildType, Operation: "apply",
		Config: st, TimeoutSeconds: int64(BuildJobTimeout / time.Second), Mode: string(store.ModeMaintenance)}, configJSON)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	jobs, err := s.enqueue(ctx, []store.Job{j}, false, nil)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.StartBuildResponse{Job: enqueuedToProto(jobs[0], st)}), nil
}

// ListBuilds lists builds, newest first.
func (s *Service) ListBuilds(ctx context.Context, req *connect.Request[imsv1.ListBuildsRequest]) (*connect.Response[imsv1.ListBuildsResponse], error) {
	if req.Msg.Limit < 0 || req.Msg.Limit > 1000 {
		return nil, s.err(ctx, errs.Field("limit", "must be between 0 and 1000"))
	}
	bs, err := s.store.ListBuilds(ctx, req.Msg.Repository, int(req.Msg.Limit))
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListBuildsResponse{}
	for _, b := range bs {
		out.Builds = append(out.Builds, buildToProto(b))
	}
	return connect.NewResponse(out), nil
}

func buildToProto(b store.Build) *imsv1.Build {
	return &imsv1.Build{Id: b.ID, Repository: b.Repository, Digest: b.Digest, Size: b.Size, MediaType: b.MediaType, Kind: b.Kind,
		Source: b.Source, SourceDigest: b.SourceDigest, CreateTime: timestamppb.New(b.CreatedAt)}
}

// Image outputs: what the image type reports after a copy into the
// install registry (the image plugin's contract).
const (
	ImageOutDigest    = "digest"
	ImageOutReference = "reference"
	ImageOutCopiedAt  = "copied_at"
)

// deployedArtifacts reads what ListInstallImages and ListInstallArtifacts
// join: install, its components and the agent's latest verification of
// each.
func (s *Service) deployedArtifacts(ctx context.Context, install string) (store.Install, []store.InstallComponent, map[string]store.ArtifactVerification, error) {
	in, err := s.store.GetInstall(ctx, install)
	if err != nil {
		return store.Install{}, nil, nil, err
	}
	comps, err := s.store.InstallComponents(ctx, in.ID)
	if err != nil {
		return store.Install{}, nil, nil, err
	}
	verified, err := s.store.ArtifactVerifications(ctx, in.ID)
	if err != nil {
		return store.Install{}, nil, nil, err
	}
	return in, comps, verified, nil
}

// ListInstallImages lists an install's image components with their
// lineage: the build their source names, and the install-side copy.
func (s *Service) ListInstallImages(ctx context.Context, req *connect.Request[imsv1.ListInstallImagesRequest]) (*connect.Response[imsv1.ListInstallImagesResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	_, comps, verified, err := s.deployedArtifacts(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListInstallImagesResponse{}
	for _, c := range comps {
		if c.ComponentType != agentproto.ImageType {
			continue
		}
		var cfg map[string]any
		_ = json.Unmarshal(c.Config, &cfg)
		src, _ := cfg[agentproto.ImageSourceKey].(string)
		im := &imsv1.InstallImage{Component: c.Name, VendorReference: src, JobId: c.JobID,
			InstallReference: c.Outputs[ImageOutReference], InstallDigest: c.Outputs[ImageOutDigest]}
		if v, ok := verified[c.Name]; ok {
			im.Verification = verificationToProto(v)
		}
		if repo, digest, err := agentproto.ParseBuildRef(src); err == nil {
			im.VendorDigest = digest
			if b, err := s.store.BuildByDigest(ctx, repo, digest); err == nil {
				im.Build = buildToProto(b)
			} else if !errs.Is(err, errs.NotFound) {
				return nil, s.err(ctx, err)
			}
		}
		if t, err := time.Parse(time.RFC3339Nano, c.Outputs[ImageOutCopiedAt]); err == nil {
			im.CopyTime = timestamppb.New(t)
		} else if !c.DeployedAt.IsZero() {
			im.CopyTime = timestamppb.New(c.DeployedAt)
		}
		out.Images = append(out.Images, im)
	}
	return connect.NewResponse(out), nil
}

// verificationToProto is an agent's verification of an artifact.
func verificationToProto(v store.ArtifactVerification) *imsv1.ArtifactVerification {
	return &imsv1.ArtifactVerification{Artifact: v.Artifact, Digest: v.Digest, KeyId: v.KeyID, Attestations: v.Attestations,
		Verdict: v.Verdict, Failed: v.Failed, JobId: v.JobID, VerifyTime: timestamppb.New(v.VerifiedAt)}
}

// Artifact kinds: the artifact each component type deploys, and the
// config key that names it (as the agent's supply-chain check reads it).
var artifactKinds = []struct{ typ, kind, key string }{
	{agentproto.ImageType, "image", agentproto.ImageSourceKey},
	{"helm", "chart", "chart"},
	{"terraform", "module", "module"},
}

// KindPlugin is the kind of a plugin release an install's agent pinned
// (agentd plugin install, pin --release): not a component's artifact,
// but the code that runs a component type.
const KindPlugin = "plugin"

// RulePluginRelease names what refused a plugin release: one of the
// agent's checks of it (its signature by a trusted imsd key, its digests,
// its type).
const RulePluginRelease = "release"

// pluginArtifacts are the plugin releases the install's agents (not
// revoked) last reported pinned, by type then agent: a release the
// agent installed is verified and deployed; one it refused is refused,
// with the refusal; one pinned but not installed yet is not verified.
func pluginArtifacts(agents []store.Agent) []*imsv1.InstallArtifact {
	var out []*imsv1.InstallArtifact
	for _, ag := range agents {
		if !ag.RevokedAt.IsZero() || ag.Plugins == nil {
			continue
		}
		for _, r := range ag.Plugins.Releases {
			_, digest, _ := strings.Cut(r.Release, "@")
			a := &imsv1.InstallArtifact{ComponentType: r.Type, Kind: KindPlugin, Reference: r.Release, Digest: digest,
				Version: r.Version, AgentId: ag.ID, State: StateNotVerified, Deployed: r.Verdict == "verified"}
			if r.Verdict != "" {
				v := &imsv1.ArtifactVerification{Artifact: r.Release, Digest: digest, KeyId: r.KeyID, Verdict: r.Verdict}
				if !r.CheckedAt.IsZero() {
					v.VerifyTime = timestamppb.New(r.CheckedAt)
				}
				if r.Verdict == "refused" {
					v.Failed = []string{RulePluginRelease + ": " + r.Reason}
					a.Rules = []string{RulePluginRelease}
				}
				a.State, a.Verification = r.Verdict, v
			}
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b *imsv1.InstallArtifact) int {
		if c := strings.Compare(a.ComponentType, b.ComponentType); c != 0 {
			return c
		}
		return strings.Compare(a.AgentId, b.AgentId)
	})
	return out
}

// artifactKind is the kind of artifact components of type typ deploy,
// and the config key naming it; "" for a type that deploys none.
func artifactKind(typ string) (kind, key string) {
	for _, k := range artifactKinds {
		if k.typ == typ {
			return k.kind, k.key
		}
	}
	return "", ""
}

// StateNotVerified is an artifact of which no verification is on record.
const StateNotVerified = "not verified"

// ListInstallArtifacts lists the artifacts an install's components
// deploy, each with the agent's last verdict on its digest, and the
// artifacts the agent refused or warned of for a component that does
// not run them (a refused first deploy, a refused new digest); then the
// plugin releases the install's agents pinned (pluginArtifacts).
func (s *Service) ListInstallArtifacts(ctx context.Context, req *connect.Request[imsv1.ListInstallArtifactsRequest]) (*connect.Response[imsv1.ListInstallArtifactsResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	if err := checkArtifactKind(req.Msg.Kind); err != nil {
		return nil, s.err(ctx, err)
	}
	if req.Msg.History {
		in, err := s.store.GetInstall(ctx, req.Msg.Install)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		h, err := s.store.VerificationHistory(ctx, in.ID, maxHistory)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		return connect.NewResponse(&imsv1.ListInstallArtifactsResponse{Artifacts: keepKind(historyArtifacts(h), req.Msg.Kind)}), nil
	}
	in, comps, verified, err := s.deployedArtifacts(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	agents, err := s.store.AgentsForInstall(ctx, in.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out, err := installArtifacts(comps, verified, func(id string) (string, error) {
		j, err := s.store.GetJob(ctx, id)
		if errs.Is(err, errs.NotFound) {
			return "", nil
		}
		return j.ComponentType, err
	})
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out = append(out, pluginArtifacts(agents)...)
	return connect.NewResponse(&imsv1.ListInstallArtifactsResponse{Artifacts: keepKind(out, req.Msg.Kind)}), nil
}

// maxHistory is the most verifications ListInstallArtifacts' history
// lists.
const maxHistory = 1000

// historyArtifacts are the verifications h on record, newest first, as
// artifacts not deployed: a component's artifact, its kind from its
// component type, or a plugin release an agent pinned.
func historyArtifacts(h []store.VerificationRecord) []*imsv1.InstallArtifact {
	out := make([]*imsv1.InstallArtifact, 0, len(h))
	for _, r := range h {
		v := r.ArtifactVerification
		a := &imsv1.InstallArtifact{Component: r.Component, ComponentType: r.ComponentType, Reference: v.Artifact, Digest: v.Digest,
			Version: r.Version, AgentId: r.AgentID}
		if r.AgentID != "" {
			a.Kind = KindPlugin
			if v.Verdict == "refused" {
				v.Failed = []string{RulePluginRelease + ": " + strings.Join(v.Failed, "; ")}
			}
		} else {
			a.Kind, _ = artifactKind(r.ComponentType)
		}
		setVerification(a, v)
		out = append(out, a)
	}
	return out
}

// checkArtifactKind checks ListInstallArtifacts' kind ("" for all).
func checkArtifactKind(k string) error {
	if k == "" || k == KindPlugin || slices.ContainsFunc(artifactKinds, func(a struct{ typ, kind, key string }) bool { return a.kind == k }) {
		return nil
	}
	return errs.Field("kind", "must be image, chart, module or plugin, got %q", k)
}

// keepKind keeps the artifacts of kind k (all for "").
func keepKind(out []*imsv1.InstallArtifact, k string) []*imsv1.InstallArtifact {
	if k == "" {
		return out
	}
	return slices.DeleteFunc(out, func(a *imsv1.InstallArtifact) bool { return a.Kind != k })
}

// installArtifacts is what ListInstallArtifacts lists of components
// comps and verifications verified (by component): each deployed
// artifact with the verdict on its digest ("not verified" when the
// verification on record is of another digest), then each verification
// of an artifact no component runs, its kind from its job's component
// type (jobType). Sorted by component, what it runs first.
func installArtifacts(comps []store.InstallComponent, verified map[string]store.ArtifactVerification, jobType func(jobID string) (string, error)) ([]*imsv1.InstallArtifact, error) {
	var out []*imsv1.InstallArtifact
	shown := map[string]bool{} // component + " " + digest
	for _, c := range comps {
		kind, key := artifactKind(c.ComponentType)
		if kind == "" {
			continue
		}
		var cfg map[string]any
		_ = json.Unmarshal(c.Config, &cfg)
		ref, _ := cfg[key].(string)
		if ref == "" {
			continue // a chart_dir, manifests or module_dir: no artifact
		}
		_, digest, _ := strings.Cut(ref, "@")
		a := &imsv1.InstallArtifact{Component: c.Name, ComponentType: c.ComponentType, Kind: kind, Reference: ref, Digest: digest,
			Deployed: true, State: StateNotVerified}
		if v, ok := verified[c.Name]; ok && v.Digest == digest {
			setVerification(a, v)
		}
		shown[c.Name+" "+digest] = true
		out = append(out, a)
	}
	for _, name := range slices.Sorted(maps.Keys(verified)) {
		v := verified[name]
		if shown[name+" "+v.Digest] {
			continue
		}
		typ, err := jobType(v.JobID)
		if err != nil {
			return nil, err
		}
		kind, _ := artifactKind(typ)
		a := &imsv1.InstallArtifact{Component: name, ComponentType: typ, Kind: kind, Reference: v.Artifact, Digest: v.Digest}
		setVerification(a, v)
		out = append(out, a)
	}
	// Stable: by component, what it runs before what was refused.
	slices.SortStableFunc(out, func(a, b *imsv1.InstallArtifact) int {
		if c := strings.Compare(a.Component, b.Component); c != 0 {
			return c
		}
		if a.Deployed != b.Deployed {
			if a.Deployed {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Digest, b.Digest)
	})
	return out, nil
}

// setVerification puts v's verdict, deciding rules and report on a.
func setVerification(a *imsv1.InstallArtifact, v store.ArtifactVerification) {
	a.Verification = verificationToProto(v)
	a.State = v.Verdict
	for _, f := range v.Failed {
		rule, _, _ := strings.Cut(f, ": ")
		a.Rules = append(a.Rules, rule)
	}
}
