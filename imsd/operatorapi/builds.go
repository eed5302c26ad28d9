package operatorapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
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

// ListInstallImages lists an install's image components with their
// lineage: the build their source names, and the install-side copy.
func (s *Service) ListInstallImages(ctx context.Context, req *connect.Request[imsv1.ListInstallImagesRequest]) (*connect.Response[imsv1.ListInstallImagesResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	comps, err := s.store.InstallComponents(ctx, in.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	verified, err := s.store.ArtifactVerifications(ctx, in.ID)
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
