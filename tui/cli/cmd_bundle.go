package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) bundleCommand() *cobra.Command {
	return group("bundle", "Offline bundles for installs with no route to imsd",
		a.bundleCreateCommand(),
		a.bundleImportResultsCommand(),
	)
}

// BundleJobsFile, BundleSealedJobsFile and BundleLayoutDir are where a
// bundle keeps its jobs (a readable view, every sensitive value masked;
// the jobs themselves, sealed to the install's agent) and its artifacts
// (an OCI image layout root: repository R is the layout oci/R).
const (
	BundleJobsFile       = "jobs.json"
	BundleSealedJobsFile = "jobs.sealed"
	BundleLayoutDir      = "oci"
)

func (a *app) bundleCreateCommand() *cobra.Command {
	var revision int64
	var install, out, vendorRegistry, haveFile, sinceResults, agentRelease string
	var pluginReleases []string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "create APP --install NAME [--revision N] -o FILE",
		Short: "Pack an install's workflow and every artifact it needs into a signed offline bundle",
		Long: `Pack everything install NAME needs to reach revision N of APP (default: the
app's latest) into one file the customer imports with agentd bundle import,
with no connection to imsd: the install's provision workflow (an update when
imsd knows it runs components already) as jobs imsd signs for the install's
agent, each with the steps it needs; every image, chart and module the jobs
read, copied by digest from the vendor registry with its signatures and
other referrers into an OCI image layout; and a manifest of every file's
SHA-256, signed with imsd's job signing key. The agent checks the manifest
against the keys it pinned at enrolment and every file against it before it
writes anything.

--have-digests FILE (what agentd bundle inventory printed on the install's
side: one digest a line) leaves out every blob the install registry holds
already, so an incremental bundle carries only what changed.
--since-results FILE (the results file of the install's last bundle) leaves
out every blob of the images that bundle's succeeded jobs loaded.`,
		Args: exactArgs("APP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if install == "" {
				return usagef("--install NAME is required")
			}
			if out == "" {
				return usagef("-o FILE is required")
			}
			have, err := readHaveDigests(haveFile)
			if err != nil {
				return err
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var held []heldArtifact
			if sinceResults != "" {
				if held, err = resultsArtifacts(sinceResults); err != nil {
					return usagef("--since-results: %v", err)
				}
			}
			res, err := c.CreateBundle(ctx, connect.NewRequest(&imsv1.CreateBundleRequest{App: args[0], Install: install, Revision: revision,
				ValidSeconds: int64(validFor / time.Second)}))
			if err != nil {
				return c.wrap(err)
			}
			b := res.Msg
			work, err := os.MkdirTemp(filepath.Dir(out), ".bundle-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			// jobs.json is the readable view (sensitive values masked);
			// jobs.sealed the jobs themselves, which only the agent opens.
			if err := os.WriteFile(filepath.Join(work, BundleJobsFile), b.GetJobsJson(), 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(work, BundleSealedJobsFile), b.GetJobsSealed(), 0o644); err != nil {
				return err
			}
			var jobs []agentproto.BundleJob
			if err := json.Unmarshal(b.GetJobsJson(), &jobs); err != nil {
				return fmt.Errorf("imsd's jobs: %w", err)
			}
			regLoc := vendorRegistry
			if regLoc == "" {
				regLoc = b.GetRegistry()
			}
			if len(held) > 0 {
				if regLoc == "" {
					return usagef("--since-results: imsd names no vendor registry: give --vendor-registry")
				}
				reg, err := ocicopy.ParseRegistry(regLoc)
				if err != nil {
					return usagef("--vendor-registry: %v", err)
				}
				// Only the repositories the pull token covers: those this
				// bundle reads.
				held = slices.DeleteFunc(held, func(h heldArtifact) bool { return !slices.Contains(b.GetRepositories(), h.repo) })
				if err := haveFromResults(cmd, reg, b.GetRegistryToken(), held, have); err != nil {
					return err
				}
			}
			var st packStats
			packed := map[agentproto.BundleArtifact]bool{}
			for _, j := range jobs {
				art, ok, err := j.Artifact()
				if err != nil {
					return err
				}
				if !ok || packed[art] {
					continue
				}
				packed[art] = true
				ref := art.Repository + "@" + art.Digest
				if regLoc == "" {
					return usagef("step %s reads %s from the vendor registry, and imsd names none: give --vendor-registry", j.Step, ref)
				}
				reg, err := ocicopy.ParseRegistry(regLoc)
				if err != nil {
					return usagef("--vendor-registry: %v", err)
				}
				if err := packArtifact(cmd, reg, ocicopy.Credentials{AccessToken: b.GetRegistryToken()}, filepath.Join(work, BundleLayoutDir), j.ComponentType, art, have, &st); err != nil {
					return fmt.Errorf("step %s: %w", j.Step, err)
				}
			}
			var rel *bundlefile.Release
			if agentRelease != "" {
				if rel, err = packRelease(cmd, agentRelease, true, a.vendorRegistryCreds(), filepath.Join(work, BundleLayoutDir), have, &st); err != nil {
					return fmt.Errorf("--agent-release: %w", err)
				}
			}
			var plugins []bundlefile.Release
			for _, ref := range pluginReleases {
				r, err := packRelease(cmd, ref, false, a.vendorRegistryCreds(), filepath.Join(work, BundleLayoutDir), have, &st)
				if err != nil {
					return fmt.Errorf("--plugin-release %s: %w", ref, err)
				}
				plugins = append(plugins, *r)
			}
			files, err := bundlefile.Scan(work)
			if err != nil {
				return err
			}
			m := bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindBundle, ID: b.GetBundleId(), InstallID: b.GetInstallId(),
				AgentID: b.GetAgentId(), App: b.GetApp(), Install: b.GetInstall(), Revision: b.GetRevision(), WorkflowKind: b.GetWorkflowKind(),
				JournalSeq: b.GetJournalSeq(), JournalHash: b.GetJournalHash(),
				Created: time.Now().UTC(), AgentRelease: rel, PluginReleases: plugins, Files: files}
			raw, err := json.MarshalIndent(m, "", "  ")
			if err != nil {
				return err
			}
			sig, err := c.SignBundle(ctx, connect.NewRequest(&imsv1.SignBundleRequest{Manifest: raw, JobsJson: b.GetJobsJson(),
				JobsSealed: b.GetJobsSealed(), JobsSignature: b.GetJobsSignature(), Install: b.GetInstallId()}))
			if err != nil {
				return c.wrap(err)
			}
			if err := bundlefile.WriteFile(out, 0o666, work, raw, bundlefile.Signature{KeyID: sig.Msg.GetKeyId(), Signature: sig.Msg.GetSignature()}); err != nil {
				return err
			}
			fi, _ := os.Stat(out)
			fmt.Fprintf(a.stdout, "wrote %s: bundle %s for install %s (agent %s), app %s revision %d, %s workflow of %d jobs, %d artifacts (%d blobs, %d bytes; %d blobs left out, held by the install already%s)%s, %d bytes in all; signed by imsd key %s, valid until %s\n",
				out, b.GetBundleId(), b.GetInstall(), b.GetAgentId(), b.GetApp(), b.GetRevision(), b.GetWorkflowKind(), len(jobs), st.artifacts,
				st.blobs, st.blobBytes, st.skipped, wholeNote(st.heldWhole), releaseNote(rel, plugins), fi.Size(), sig.Msg.GetKeyId(), time.UnixMilli(b.GetExpireUnixMs()).UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&install, "install", "", "the install the bundle is for (name or id)")
	cmd.Flags().Int64Var(&revision, "revision", 0, "the app revision (default: the app's latest)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the bundle `file` to write")
	cmd.Flags().StringVar(&vendorRegistry, "vendor-registry", "", "the vendor registry `location` to copy artifacts from (default: the one imsd names)")
	cmd.Flags().StringVar(&haveFile, "have-digests", "", "`file` of digests the install registry holds (agentd bundle inventory): their blobs are left out")
	cmd.Flags().StringVar(&sinceResults, "since-results", "", "a results `file` of the install's last bundle (agentd bundle export-results): the blobs of the images it loaded are left out")
	cmd.Flags().StringVar(&agentRelease, "agent-release", "", "an agent release to carry, oci://HOST/REPOSITORY@sha256:... (byoc agent publish prints it; credentials from $BYOC_VENDOR_REGISTRY_*)")
	cmd.Flags().StringArrayVar(&pluginReleases, "plugin-release", nil, "a plugin release to carry, oci://HOST/REPOSITORY@sha256:... (byoc plugin publish prints it; repeatable)")
	cmd.Flags().DurationVar(&validFor, "valid-for", 0, "how long the bundle's signatures stay valid (default 720h, at most 2160h)")
	return cmd
}

type packStats struct {
	// heldWhole counts charts and modules left out whole (held by the
	// install, absent from the vendor registry).
	artifacts, blobs, skipped, heldWhole int
	blobBytes                            int64
}

// packArtifact copies art (repo@dg) with its referrers from reg into
// the layout root, leaving out the blobs in have. A chart or module the
// vendor registry lacks and the install holds (have lists its manifest)
// is left out whole: the agent finds it in the install registry.
func packArtifact(cmd *cobra.Command, reg ocicopy.Registry, creds ocicopy.Credentials, root, typ string, art agentproto.BundleArtifact, have map[digest.Digest]bool, st *packStats) error {
	ctx := cmd.Context()
	repo, dg := art.Repository, digest.Digest(art.Digest)
	src, err := ocicopy.Open(ctx, reg, repo, creds)
	if err != nil {
		return err
	}
	defer src.Close()
	if typ != agentproto.ImageType {
		if _, err := src.Resolve(ctx, dg.String()); err != nil {
			if have[dg] {
				st.heldWhole++
				return nil
			}
			kind := map[string]string{"helm": "helm", "terraform": "terraform"}[typ]
			return fmt.Errorf("%s %s@%s: not in the vendor registry %s (%v): byoc build package DIR --kind %s --repo %s puts it there, or --have-digests lists it when the install holds it", art.Field, repo, dg, reg, err, kind, repo)
		}
	}
	return copyInto(ctx, src, root, art, have, st)
}

// copyInto copies art from src, with its referrers, into the layout
// root at its repository, leaving out the blobs in have.
func copyInto(ctx context.Context, src *ocicopy.Repo, root string, art agentproto.BundleArtifact, have map[digest.Digest]bool, st *packStats) error {
	dst, err := ocicopy.Open(ctx, ocicopy.Registry{LayoutRoot: root}, art.Repository, ocicopy.Credentials{})
	if err != nil {
		return err
	}
	defer dst.Close()
	plan, err := ocicopy.PlanCopy(ctx, src, dst, digest.Digest(art.Digest), ocicopy.Options{})
	if err != nil {
		return err
	}
	for i := range plan.Nodes {
		n := &plan.Nodes[i]
		if !n.Manifest && have[n.Descriptor.Digest] && !n.Present {
			n.Present = true
			st.skipped++
		}
	}
	res, err := plan.Apply(ctx, ocicopy.Options{})
	if err != nil {
		return err
	}
	st.artifacts++
	st.blobs += res.BlobsCopied
	st.blobBytes += res.BlobBytes
	return nil
}

// packRelease copies the agent release (agent) or plugin release ref,
// with its signature, into the layout root at its repository, after
// checking it is one.
func packRelease(cmd *cobra.Command, ref string, agent bool, creds ocicopy.Credentials, root string, have map[digest.Digest]bool, st *packStats) (*bundlefile.Release, error) {
	ctx := cmd.Context()
	r, err := plugindist.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	src, err := ocicopy.Open(ctx, r.Registry, r.Repository, creds)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var m *plugindist.Manifest
	if agent {
		m, err = plugindist.ReadAgent(ctx, src, r.Digest)
	} else {
		m, err = plugindist.Read(ctx, src, r.Digest)
	}
	if err != nil {
		return nil, err
	}
	art := agentproto.BundleArtifact{Field: "release", Repository: r.Repository, Target: r.Repository, Digest: r.Digest.String()}
	if err := copyInto(ctx, src, root, art, have, st); err != nil {
		return nil, err
	}
	return &bundlefile.Release{Type: m.Type, Repository: r.Repository, Digest: r.Digest.String(), Version: m.Version}, nil
}

// releaseNote is what the summary says of the releases.
func releaseNote(agent *bundlefile.Release, plugins []bundlefile.Release) string {
	var s string
	if agent != nil {
		s = fmt.Sprintf(", agent release %s (%s@%s)", agent.Version, agent.Repository, agent.Digest)
	}
	for _, p := range plugins {
		s += fmt.Sprintf(", plugin release %s %s (%s@%s)", p.Type, p.Version, p.Repository, p.Digest)
	}
	return s
}

// wholeNote is what the summary says of the charts and modules left out
// whole.
func wholeNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d charts or modules left out whole", n)
}

// readHaveDigests reads a file of digests, one a line (blank lines and
// lines starting with # are skipped); "" reads none.
func readHaveDigests(path string) (map[digest.Digest]bool, error) {
	have := map[digest.Digest]bool{}
	if path == "" {
		return have, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--have-digests: %v", err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		d, err := digest.Parse(line)
		if err != nil {
			return nil, usagef("--have-digests %s:%d: %v", path, i+1, err)
		}
		have[d] = true
	}
	return have, nil
}

// Results files: one that fits one call (imsd's 4 MiB a message, less a
// margin for the rest of the request) goes in one ImportBundleResults,
// which every imsd takes; a larger one in parts of resultsPart bytes
// (UploadBundleResults), up to maxResultsUpload in all.
const (
	oneCallResults   = 4<<20 - 64<<10
	resultsPart      = 1 << 20
	maxResultsUpload = 256 << 20
)

func (a *app) bundleImportResultsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "import-results FILE",
		Short: "Give imsd the results an install's agent wrote after an offline bundle",
		Long: `Send FILE (agentd bundle export-results on the install's side) to imsd, which
checks the agent's signature, that the agent's audit journal in it verifies
and continues the one imsd took before, that every job is one imsd signed for
that agent and that every result is the one the journal recorded; then it
records the bundle's workflow, its jobs and their results, what the install
now runs and the audit events, so byoc install get, byoc job list and the
console catch up. Importing the same file again changes nothing; a later
file of the same bundle adds the results of steps re-run since (refused
by the customer's controls at first), and is refused if it contradicts a
result imsd holds.

A file of up to 4 MiB goes in one call; a larger one, up to 256 MiB, in
parts of 1 MiB, which imsd checks as they come and as a whole once all
came, before it records anything.`,
		Args: exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			if fi.Size() > maxResultsUpload {
				return fmt.Errorf("%s: %d bytes: imsd takes a results file of at most %d MiB", args[0], fi.Size(), maxResultsUpload>>20)
			}
			install, err := resultsInstall(f)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			var r *imsv1.ImportBundleResultsResponse
			if fi.Size() <= oneCallResults {
				b, err := os.ReadFile(args[0])
				if err != nil {
					return err
				}
				res, err := c.ImportBundleResults(cmd.Context(), connect.NewRequest(&imsv1.ImportBundleResultsRequest{Install: install, File: b}))
				if err != nil {
					return c.wrap(err)
				}
				r = res.Msg
			} else if r, err = uploadResults(cmd.Context(), c, install, f, fi.Size()); err != nil {
				if connect.CodeOf(err) == connect.CodeUnimplemented {
					return fmt.Errorf("%s: %d bytes, more than one call to imsd carries (4 MiB), and imsd at %s does not take results files in parts: it is older than this byoc; upgrade imsd", args[0], fi.Size(), c.target.server)
				}
				return c.wrap(err)
			}
			if n := r.GetAddedJobs(); n > 0 {
				fmt.Fprintf(a.stdout, "added %d results to bundle %s's, imported before: workflow %s %s; the agent's journal verified (%d records, head %s)\n",
					n, r.GetBundleId(), r.GetWorkflowId(), workflowStateWord(r.GetWorkflowState()), r.GetJournalRecords(), r.GetJournalHash())
				return nil
			}
			if r.GetAlreadyImported() {
				fmt.Fprintf(a.stdout, "results of bundle %s were imported before (workflow %s, %s); nothing changed\n", r.GetBundleId(), r.GetWorkflowId(), workflowStateWord(r.GetWorkflowState()))
				return nil
			}
			fmt.Fprintf(a.stdout, "imported the results of bundle %s: workflow %s %s, %d jobs; the agent's journal verified (%d records, head %s)\n",
				r.GetBundleId(), r.GetWorkflowId(), workflowStateWord(r.GetWorkflowState()), r.GetJobs(), r.GetJournalRecords(), r.GetJournalHash())
			return nil
		},
	}
}

// uploadResults sends the results file f (size bytes) in parts: its
// digests first (read once through), then each part, read again.
func uploadResults(ctx context.Context, c *client, install string, f *os.File, size int64) (*imsv1.ImportBundleResultsResponse, error) {
	head := &imsv1.UploadBundleResultsRequest{Install: install, Size: size, PartSize: resultsPart}
	whole := sha256.New()
	buf := make([]byte, resultsPart)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			whole.Write(buf[:n])
			s := sha256.Sum256(buf[:n])
			head.PartSha256 = append(head.PartSha256, hex.EncodeToString(s[:]))
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		} else if err != nil {
			return nil, err
		}
	}
	head.Sha256 = hex.EncodeToString(whole.Sum(nil))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	st := c.UploadBundleResults(ctx)
	// A send that fails means imsd ended the call: its answer says why.
	send := func(m *imsv1.UploadBundleResultsRequest) bool { return st.Send(m) == nil }
	if send(head) {
		for i := range head.PartSha256 {
			n, err := io.ReadFull(f, buf)
			if err != nil && err != io.ErrUnexpectedEOF {
				return nil, fmt.Errorf("read part %d: %w", i+1, err)
			}
			if !send(&imsv1.UploadBundleResultsRequest{Part: int32(i + 1), Data: buf[:n]}) {
				break
			}
		}
	}
	res, err := st.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	if res.Msg.GetResult() == nil {
		return nil, fmt.Errorf("imsd answered the upload with no result")
	}
	return res.Msg.GetResult(), nil
}

func workflowStateWord(s imsv1.WorkflowState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_STATE_"))
}

// resultsInstall reads the install id a results file's manifest names
// (imsd checks the signature).
func resultsInstall(r io.Reader) (string, error) {
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil || h.Name != bundlefile.ManifestName {
		return "", fmt.Errorf("not a results file: its first entry is not %s", bundlefile.ManifestName)
	}
	var m bundlefile.Manifest
	if err := json.NewDecoder(io.LimitReader(tr, 16<<20)).Decode(&m); err != nil {
		return "", fmt.Errorf("%s: %w", bundlefile.ManifestName, err)
	}
	if m.Kind != bundlefile.KindResults || m.InstallID == "" {
		return "", fmt.Errorf("not a results file (kind %q)", m.Kind)
	}
	return m.InstallID, nil
}

// heldArtifact is an image a bundle's succeeded job loaded: its vendor
// repository and root digest.
type heldArtifact struct {
	repo string
	root digest.Digest
}

// resultsArtifacts reads, from a results file, the images the bundle's
// succeeded image jobs loaded. The file is not verified here (imsd does
// that, byoc bundle import-results): it only leaves blobs out of the
// next bundle, and an agent lacking one refuses that bundle's import.
func resultsArtifacts(path string) ([]heldArtifact, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.Name == "results.json" || h.Name == BundleJobsFile {
			if files[h.Name], err = io.ReadAll(io.LimitReader(tr, 64<<20)); err != nil {
				return nil, err
			}
		}
	}
	var res struct {
		Jobs []struct {
			JobID   string            `json:"job_id"`
			Outcome string            `json:"outcome"`
			Outputs map[string]string `json:"outputs"`
		} `json:"jobs"`
	}
	var jobs []agentproto.BundleJob
	if err := json.Unmarshal(files["results.json"], &res); err != nil {
		return nil, fmt.Errorf("%s: results.json: %w", path, err)
	}
	if err := json.Unmarshal(files[BundleJobsFile], &jobs); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, BundleJobsFile, err)
	}
	src := map[string]string{}
	for _, j := range jobs {
		if j.ComponentType == agentproto.ImageType {
			if cfg, err := j.DecodeConfig(); err == nil {
				s, _ := cfg[agentproto.ImageSourceKey].(string)
				src[j.JobID] = s
			}
		}
	}
	var out []heldArtifact
	for _, r := range res.Jobs {
		if r.Outcome != "succeeded" || src[r.JobID] == "" {
			continue
		}
		repo, dg, err := agentproto.ParseBuildRef(src[r.JobID])
		if err == nil {
			out = append(out, heldArtifact{repo, digest.Digest(dg)})
		}
	}
	return out, nil
}

// haveFromResults adds to have every node of the held images' graphs (with
// their referrers), read from the vendor registry.
func haveFromResults(cmd *cobra.Command, reg ocicopy.Registry, token string, held []heldArtifact, have map[digest.Digest]bool) error {
	for _, h := range held {
		r, err := ocicopy.Open(cmd.Context(), reg, h.repo, ocicopy.Credentials{AccessToken: token})
		if err != nil {
			return err
		}
		nodes, _, err := ocicopy.Walk(cmd.Context(), r, h.root, true)
		r.Close()
		if err != nil {
			return fmt.Errorf("--since-results: %s@%s: %w", h.repo, h.root, err)
		}
		for _, n := range nodes {
			have[n.Descriptor.Digest] = true
		}
	}
	return nil
}
