package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) buildCommand() *cobra.Command {
	return group("build", "Builds: artifacts the build agent syncs or packages into the vendor registry",
		a.buildSyncCommand(),
		a.buildPackageCommand(),
		a.buildListCommand(),
		a.buildAgentTokenCommand(),
	)
}

func (a *app) buildAgentTokenCommand() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "agent-token [--ttl 24h]",
		Short: "Issue a single-use enrolment token for the vendor's build agent (agentd --role build)",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			secs, err := ttlSeconds("ttl", ttl)
			if err != nil {
				return err
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CreateBuildAgentToken(cmd.Context(), connect.NewRequest(&imsv1.CreateBuildAgentTokenRequest{TtlSeconds: secs}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			tok := res.Msg.GetEnrollmentToken()
			fmt.Fprintf(a.stdout, "Build agent enrolment token (single use, shown once; expires %s):\n  %s\n\n", ago(a.now(), tok.GetExpireTime()), tok.GetToken())
			fmt.Fprintf(a.stdout, "Run the vendor's build agent (the only writer of the vendor registry) with:\n  agentd --role build --ims %s --enroll-token %s --state-dir %s\n",
				shellQuote(c.target.server), shellQuote(tok.GetToken()), shellQuote("./build-agent"))
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "token lifetime (default: the server's, 24h)")
	return cmd
}

func (a *app) buildSyncCommand() *cobra.Command {
	var repo, tag string
	var wait bool
	cmd := &cobra.Command{
		Use:   "sync SOURCE --repo REPOSITORY [--tag T] [--wait]",
		Short: "Sync an image or OCI artifact (by tag or digest) into the vendor registry",
		Long: `Queue a build job: the build agent copies SOURCE (HOST/REPO:TAG or
HOST/REPO@DIGEST; a multi-arch index and its referrers whole) into the
vendor registry's REPOSITORY, and imsd records the build: its digest, which
components reference (REPOSITORY@DIGEST), with its source.`,
		Example: `  byoc build sync 127.0.0.1:5001/library/hello:1.0 --repo hello --wait`,
		Args:    exactArgs("SOURCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.startBuild(cmd.Context(), &imsv1.StartBuildRequest{Kind: "sync", Source: args[0], Repository: repo, Tag: tag}, wait)
		},
	}
	cmd.Flags().StringVar(&repo, "repo", "", "vendor registry repository to write (required)")
	cmd.Flags().StringVar(&tag, "tag", "", "also tag it in the vendor registry (builds are referenced by digest)")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the build job until it ends and print the build")
	_ = cmd.MarkFlagRequired("repo")
	return cmd
}

func (a *app) buildPackageCommand() *cobra.Command {
	var repo, tag, kind string
	var wait bool
	cmd := &cobra.Command{
		Use:   "package DIR --kind helm|terraform --repo REPOSITORY [--wait]",
		Short: "Package a Helm chart or Terraform module directory as an OCI artifact in the vendor registry",
		Args:  exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if kind != "helm" && kind != "terraform" {
				return usagef("--kind must be helm or terraform, got %q", kind)
			}
			archive, err := tarDir(args[0], kind == "terraform")
			if err != nil {
				return err
			}
			return a.startBuild(cmd.Context(), &imsv1.StartBuildRequest{Kind: kind, Source: filepath.Base(filepath.Clean(args[0])),
				Repository: repo, Tag: tag, Archive: archive}, wait)
		},
	}
	cmd.Flags().StringVar(&repo, "repo", "", "vendor registry repository to write (required)")
	cmd.Flags().StringVar(&kind, "kind", "", "helm or terraform (required)")
	cmd.Flags().StringVar(&tag, "tag", "", "also tag it in the vendor registry")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the build job until it ends and print the build")
	_ = cmd.MarkFlagRequired("repo")
	_ = cmd.MarkFlagRequired("kind")
	return cmd
}

// tarDir packs dir as a gzipped tar with fixed times and owners, so the
// same files pack to the same bytes (and the same digest). For a
// terraform module it leaves out what belongs to a local run, not to the
// module, as agentd module push does: .terraform directories (which an
// agent refuses) and state files.
func tarDir(dir string, terraform bool) ([]byte, error) {
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if terraform {
			base := d.Name()
			if d.IsDir() && base == ".terraform" {
				return filepath.SkipDir
			}
			if !d.IsDir() && (strings.HasSuffix(base, ".tfstate") || strings.HasSuffix(base, ".tfstate.backup") || base == ".terraform.tfstate.lock.info") {
				return nil
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return fmt.Errorf("%s: only regular files and directories are packaged", p)
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if info.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			return tw.WriteHeader(h)
		}
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("package %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (a *app) startBuild(ctx context.Context, req *imsv1.StartBuildRequest, wait bool) error {
	c, err := a.connect()
	if err != nil {
		return err
	}
	res, err := c.StartBuild(ctx, connect.NewRequest(req))
	if err != nil {
		return c.wrap(err)
	}
	job := res.Msg.GetJob()
	if !wait {
		if a.jsonOutput() {
			return writeJSON(a.stdout, res.Msg)
		}
		fmt.Fprintf(a.stdout, "Build job %s queued for the build agent (follow it: byoc job logs %s --follow).\n", job.GetId(), job.GetId())
		return nil
	}
	if err := a.followJob(ctx, c, job.GetId(), logFormat{}); err != nil {
		return err
	}
	bs, err := c.ListBuilds(ctx, connect.NewRequest(&imsv1.ListBuildsRequest{Repository: req.Repository, Limit: 20}))
	if err != nil {
		return c.wrap(err)
	}
	for _, b := range bs.Msg.GetBuilds() {
		if b.GetId() == job.GetId() {
			if a.jsonOutput() {
				return writeJSON(a.stdout, b)
			}
			fmt.Fprintf(a.stdout, "Build %s@%s (from %s)\n", b.GetRepository(), b.GetDigest(), b.GetSource())
			return nil
		}
	}
	return fmt.Errorf("build job %s succeeded but imsd recorded no build for it", job.GetId())
}

func (a *app) buildListCommand() *cobra.Command {
	var repo string
	var watch bool
	var limit int32
	cmd := &cobra.Command{
		Use:   "list [--repo REPOSITORY] [--watch]",
		Short: "List builds, newest first",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			header := []string{"REFERENCE", "KIND", "SOURCE", "SIZE", "BUILT"}
			if a.wideOutput() {
				header = append(header, "SOURCE DIGEST", "MEDIA TYPE", "JOB")
			}
			return runList(cmd.Context(), a, watch, listing[*imsv1.Build]{
				noun: "builds",
				fetch: func(ctx context.Context) ([]*imsv1.Build, error) {
					res, err := c.ListBuilds(ctx, connect.NewRequest(&imsv1.ListBuildsRequest{Repository: repo, Limit: limit}))
					if err != nil {
						return nil, c.wrap(err)
					}
					return res.Msg.GetBuilds(), nil
				},
				id:     (*imsv1.Build).GetId,
				header: header,
				row: func(_ context.Context, now time.Time, b *imsv1.Build) []string {
					row := []string{b.GetRepository() + "@" + b.GetDigest(), b.GetKind(), b.GetSource(), fmt.Sprint(b.GetSize()), ago(now, b.GetCreateTime())}
					if a.wideOutput() {
						row = append(row, b.GetSourceDigest(), b.GetMediaType(), b.GetId())
					}
					return row
				},
			})
		},
	}
	cmd.Flags().StringVar(&repo, "repo", "", "only this vendor repository")
	cmd.Flags().Int32Var(&limit, "limit", 100, "at most this many (up to 1000)")
	watchFlag(cmd, &watch, "each new build")
	return cmd
}

func (a *app) installImagesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "images INSTALL",
		Short: "List what an install's image components run, by digest, with their lineage",
		Long: `For each image component of INSTALL: the chain source reference -> vendor
digest (the build) -> install digest, and when each copy happened; and
what the install's agent verified of it under the customer's supply-chain
policy (agentd policy supply-chain): the key that signed it, the
attestations found (SLSA provenance, SBOM, vulnerability scan) and the
verdict. -o yaml shows each rule not met. byoc install artifacts lists the
agent's verdict on every artifact kind (images, charts, modules).`,
		Args: exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.ListInstallImages(cmd.Context(), connect.NewRequest(&imsv1.ListInstallImagesRequest{Install: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			if err := sortRows(a, res.Msg.GetImages()); err != nil {
				return err
			}
			if a.jsonOutput() {
				return writeJSONList(a.stdout, res.Msg.GetImages())
			}
			if len(res.Msg.GetImages()) == 0 {
				fmt.Fprintf(a.stdout, "Install %s runs no image component yet.\n", args[0])
				return nil
			}
			now := a.now()
			for i, im := range res.Msg.GetImages() {
				if i > 0 {
					fmt.Fprintln(a.stdout)
				}
				b := im.GetBuild()
				fmt.Fprintf(a.stdout, "%s\n", im.GetComponent())
				if b != nil {
					fmt.Fprintf(a.stdout, "  source   %s  (%s)\n", b.GetSource(), dash(b.GetSourceDigest()))
					fmt.Fprintf(a.stdout, "  vendor   %s@%s  synced %s by build %s\n", b.GetRepository(), b.GetDigest(), ago(now, b.GetCreateTime()), b.GetId())
				} else {
					fmt.Fprintf(a.stdout, "  source   -  (imsd has no build of %s)\n", im.GetVendorReference())
					fmt.Fprintf(a.stdout, "  vendor   %s\n", dash(im.GetVendorReference()))
				}
				copied := "-"
				if im.GetCopyTime() != nil {
					copied = ago(now, im.GetCopyTime())
				}
				fmt.Fprintf(a.stdout, "  install  %s  copied %s by job %s\n", dash(im.GetInstallReference()), copied, dash(im.GetJobId()))
				if d := im.GetInstallDigest(); d != "" && d != im.GetVendorDigest() {
					fmt.Fprintf(a.stdout, "  WARNING  install digest %s differs from the vendor digest %s\n", d, im.GetVendorDigest())
				}
				fmt.Fprintf(a.stdout, "  verified %s\n", verifiedLine(now, im.GetVerification()))
			}
			return nil
		},
	}
}

// verifiedLine says in one line what an agent verified of an artifact.
func verifiedLine(now time.Time, v *imsv1.ArtifactVerification) string {
	if v == nil {
		return "-  (the agent reported no supply-chain check: no policy)"
	}
	verdict := strings.ToUpper(v.GetVerdict())
	var parts []string
	if v.GetKeyId() != "" {
		parts = append(parts, "signed by key "+v.GetKeyId())
	} else {
		parts = append(parts, "no trusted signature")
	}
	var att []string
	for _, t := range v.GetAttestations() {
		att = append(att, attestationName(t))
	}
	if len(att) > 0 {
		parts = append(parts, "attested: "+strings.Join(att, ", "))
	}
	if n := len(v.GetFailed()); n > 0 {
		rules := make([]string, 0, n)
		for _, f := range v.GetFailed() {
			rule, _, _ := strings.Cut(f, ": ")
			rules = append(rules, rule)
		}
		parts = append(parts, "rules not met: "+strings.Join(rules, ", "))
	}
	return fmt.Sprintf("%s  %s  (%s by job %s)", verdict, strings.Join(parts, "; "), ago(now, v.GetVerifyTime()), dash(v.GetJobId()))
}

// attestationName is a short name of an in-toto predicate type.
func attestationName(t string) string {
	switch t {
	case "https://slsa.dev/provenance/v1":
		return "slsa-provenance"
	case "https://spdx.dev/Document":
		return "sbom (spdx)"
	case "https://cyclonedx.org/bom":
		return "sbom (cyclonedx)"
	case "https://cosign.sigstore.dev/attestation/vuln/v1":
		return "vulnerability scan"
	}
	return t
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
