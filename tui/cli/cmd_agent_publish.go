package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
)

func (a *app) agentPublishCommand() *cobra.Command {
	var version, to, keyFile string
	cmd := &cobra.Command{
		Use:   "publish DIR --version VERSION --to REPOSITORY --signing-key FILE",
		Short: "Publish an agent release (agentd and byoc-plugins) to the vendor registry: an OCI artifact, signed",
		Long: `Pack an agent release as an OCI artifact (artifact type
application/vnd.byoc.agent.v1: one layer per file and OS/architecture),
push it to --to tagged with its version, and sign it with imsd's job
signing key (--signing-key: the PKCS#8 Ed25519 file imsd --signing-key
reads), as byoc plugin publish does a plugin release. Agents check that
signature with the imsd keys they pinned at enrolment, and apply the
release only as their customer's update policy allows (agentd update).

DIR holds, for each platform, agentd_OS_ARCH and byoc-plugins_OS_ARCH
(agentd_linux_amd64), built with their version set (make build
VERSION=...): the agent checks that each prints --version as VERSION
before it swaps them in. VERSION is a semantic version (1.4.2).

--to is the repository: HOST[:PORT]/REPOSITORY (plain HTTP for a loopback
host), or oci:DIR, an OCI image layout. Registry credentials come from
$BYOC_VENDOR_REGISTRY_USERNAME and _PASSWORD, or _TOKEN.

It prints the release's reference by digest, for each customer's admin:

  agentd update apply oci://HOST/REPOSITORY@sha256:...`,
		Args: exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version == "" || to == "" || keyFile == "" {
				return usagef("--version, --to and --signing-key are required")
			}
			key, err := readSigningKey(keyFile)
			if err != nil {
				return err
			}
			rel, err := agentBinaries(args[0], version)
			if err != nil {
				return err
			}
			if err := rel.Check(); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			ref, err := ocicopy.ParseReference(strings.TrimPrefix(to, "oci://"))
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			if ref.Digest != "" || ref.Tag != "" {
				return usagef("--to names a repository; the release is tagged with its version")
			}
			repo, err := ocicopy.Open(cmd.Context(), ref.Registry, ref.Repository, a.vendorRegistryCreds())
			if err != nil {
				return err
			}
			defer repo.Close()
			md, err := plugindist.PushAgent(cmd.Context(), repo, version, rel)
			if err != nil {
				return fmt.Errorf("publish agent %s to %s: %w", version, repo.Name(), err)
			}
			sig, err := plugindist.Sign(cmd.Context(), repo, md, plugindist.AgentType, version, key)
			if err != nil {
				return fmt.Errorf("sign agent %s in %s: %w", version, repo.Name(), err)
			}
			ref.Digest = md.Digest
			out := ref.String()
			if !ref.Registry.IsLayout() {
				out = "oci://" + out
			}
			platforms := slices.Sorted(maps.Keys(rel.Binaries))
			if a.jsonOutput() {
				b, err := json.MarshalIndent(map[string]any{"reference": out, "version": version,
					"digest": md.Digest.String(), "platforms": platforms, "signed_by": sig.KeyID}, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s\n", b)
				return err
			}
			fmt.Fprintf(a.stdout, "Published agent %s (%s), signed by imsd key %s:\n  %s\n", version, strings.Join(platforms, ", "), sig.KeyID, out)
			fmt.Fprintf(a.stdout, "Offer it with byoc agent update INSTALL --release %s (or a customer applies it with agentd update apply); each agent takes it only as its customer's policy allows\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&version, "version", "", "the release's semantic version, its tag (required)")
	cmd.Flags().StringVar(&to, "to", "", "the repository: HOST[:PORT]/REPOSITORY or oci:DIR (required)")
	cmd.Flags().StringVar(&keyFile, "signing-key", "", "imsd's job signing key file (PKCS#8 PEM, Ed25519) (required)")
	return cmd
}

// agentBinaries reads DIR's agentd_OS_ARCH and byoc-plugins_OS_ARCH.
func agentBinaries(dir, version string) (plugindist.AgentRelease, error) {
	rel := plugindist.AgentRelease{Version: version, Binaries: map[string]map[string][]byte{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return rel, err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		for _, f := range plugindist.AgentFiles {
			rest, ok := strings.CutPrefix(e.Name(), f+"_")
			if !ok {
				continue
			}
			osName, arch, ok := strings.Cut(rest, "_")
			if !ok || osName == "" || arch == "" || strings.Contains(arch, "_") {
				return rel, fmt.Errorf("%s: %s: want %s_OS_ARCH", dir, e.Name(), f)
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return rel, err
			}
			p := osName + "/" + arch
			if rel.Binaries[p] == nil {
				rel.Binaries[p] = map[string][]byte{}
			}
			rel.Binaries[p][f] = b
		}
	}
	if len(rel.Binaries) == 0 {
		return rel, fmt.Errorf("%s holds no agentd_OS_ARCH and byoc-plugins_OS_ARCH binaries", dir)
	}
	return rel, nil
}
