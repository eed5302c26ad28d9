package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
)

// describeTimeout bounds "BINARY describe" run by publish.
const describeTimeout = 30 * time.Second

func (a *app) pluginPublishCommand() *cobra.Command {
	var name, version, to, keyFile, platform, describeFile string
	cmd := &cobra.Command{
		Use:   "publish DIR|BINARY",
		Short: "Publish a plugin release to the vendor registry: an OCI artifact of its binaries and describe output, signed",
		Long: `Pack a plugin release as an OCI artifact (artifact type
application/vnd.byoc.plugin.v1: the plugin's describe output as its config,
one layer per OS/architecture binary), push it to --to tagged with its
version, and sign it with imsd's job signing key (--signing-key: the
PKCS#8 Ed25519 file imsd --signing-key reads, DATA-DIR/signing.key by
default). Agents check that signature with the imsd keys they pinned at
enrolment: nothing else needs to be trusted.

BINARY is the plugin for --platform (this machine's by default). DIR holds
one binary per platform, named byoc-plugin-NAME_OS_ARCH
(byoc-plugin-kvfile_linux_amd64). The describe output is what the binary
for this machine prints when run as "BINARY describe" (or --describe FILE);
its type and version must be --name and --version.

--to is the repository: HOST[:PORT]/REPOSITORY (plain HTTP for a loopback
host), or oci:DIR, an OCI image layout that "byoc build sync oci:DIR@DIGEST
--repo REPOSITORY" then copies into the vendor registry through the build
agent, signature included. Registry credentials come from
$BYOC_VENDOR_REGISTRY_USERNAME and _PASSWORD, or _TOKEN.

It prints the release's reference by digest, for:

  byoc plugin register oci://HOST/REPOSITORY@sha256:...
  agentd plugin install oci://HOST/REPOSITORY@sha256:...   (on each agent)`,
		Args: exactArgs("DIR|BINARY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" || version == "" || to == "" || keyFile == "" {
				return usagef("--name, --version, --to and --signing-key are required")
			}
			key, err := readSigningKey(keyFile)
			if err != nil {
				return err
			}
			bins, err := pluginBinaries(args[0], name, platform)
			if err != nil {
				return err
			}
			describe, err := a.pluginDescribe(cmd.Context(), bins, describeFile)
			if err != nil {
				return err
			}
			rel := plugindist.Release{Type: name, Version: version, Describe: describe, Binaries: map[string][]byte{}}
			for p, path := range bins {
				if rel.Binaries[p], err = os.ReadFile(path); err != nil {
					return err
				}
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
			md, err := plugindist.Push(cmd.Context(), repo, version, rel)
			if err != nil {
				return fmt.Errorf("publish %s %s to %s: %w", name, version, repo.Name(), err)
			}
			sig, err := plugindist.Sign(cmd.Context(), repo, md, name, version, key)
			if err != nil {
				return fmt.Errorf("sign %s %s in %s: %w", name, version, repo.Name(), err)
			}
			ref.Digest = md.Digest
			out := ref.String()
			if !ref.Registry.IsLayout() {
				out = "oci://" + out
			}
			platforms := slices.Sorted(func(yield func(string) bool) {
				for p := range bins {
					if !yield(p) {
						return
					}
				}
			})
			if a.jsonOutput() {
				b, err := json.MarshalIndent(map[string]any{"reference": out, "type": name, "version": version,
					"digest": md.Digest.String(), "platforms": platforms, "signed_by": sig.KeyID}, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s\n", b)
				return err
			}
			fmt.Fprintf(a.stdout, "Published %s %s (%s), signed by imsd key %s:\n  %s\n", name, version, strings.Join(platforms, ", "), sig.KeyID, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the plugin's type (required)")
	cmd.Flags().StringVar(&version, "version", "", "the release's version, its tag (required)")
	cmd.Flags().StringVar(&to, "to", "", "the repository: HOST[:PORT]/REPOSITORY or oci:DIR (required)")
	cmd.Flags().StringVar(&keyFile, "signing-key", "", "imsd's job signing key file (PKCS#8 PEM, Ed25519) (required)")
	cmd.Flags().StringVar(&platform, "platform", runtime.GOOS+"/"+runtime.GOARCH, "BINARY's OS/ARCH")
	cmd.Flags().StringVar(&describeFile, "describe", "", "the describe output, when no binary runs on this machine")
	return cmd
}

// readSigningKey reads an Ed25519 private key in PKCS#8 PEM, the format
// of imsd's job signing key.
func readSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--signing-key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("--signing-key %s: no PEM block (want imsd's signing key, PKCS#8 Ed25519)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("--signing-key %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("--signing-key %s: a %T, not an Ed25519 key", path, k)
	}
	return key, nil
}

// pluginBinaries finds a release's binaries by platform: BINARY for
// platform, or DIR's byoc-plugin-NAME_OS_ARCH files.
func pluginBinaries(arg, name, platform string) (map[string]string, error) {
	fi, err := os.Stat(arg)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return map[string]string{platform: arg}, nil
	}
	entries, err := os.ReadDir(arg)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	prefix := "byoc-plugin-" + name + "_"
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || e.IsDir() {
			continue
		}
		osName, arch, ok := strings.Cut(rest, "_")
		if !ok || osName == "" || arch == "" {
			return nil, fmt.Errorf("%s: %s: want %sOS_ARCH", arg, e.Name(), prefix)
		}
		out[osName+"/"+arch] = filepath.Join(arg, e.Name())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no %sOS_ARCH binary", arg, prefix)
	}
	return out, nil
}

// pluginDescribe returns file's content, or what the binary for this
// machine prints when run as "BINARY describe".
func (a *app) pluginDescribe(ctx context.Context, bins map[string]string, file string) ([]byte, error) {
	if file != "" {
		return a.readDescribe(file)
	}
	here := runtime.GOOS + "/" + runtime.GOARCH
	bin, ok := bins[here]
	if !ok {
		return nil, fmt.Errorf("no binary for this machine (%s) to run describe: give --describe FILE", here)
	}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	abs, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	c := exec.CommandContext(ctx, abs, "describe")
	c.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("%s describe: %w", bin, err)
	}
	return out, nil
}

// vendorRegistryCreds are the vendor registry's credentials from the
// environment.
func (a *app) vendorRegistryCreds() ocicopy.Credentials {
	env := map[string]string{}
	for _, k := range []string{"USERNAME", "PASSWORD", "TOKEN"} {
		env["BYOC_VENDOR_REGISTRY_"+k] = a.getenv("BYOC_VENDOR_REGISTRY_" + k)
	}
	return ocicopy.CredentialsFromEnv(env, "BYOC_VENDOR_REGISTRY")
}

// readReleaseDescribe reads the describe output of the release at ref
// (oci://HOST/REPOSITORY@sha256:..., or oci:DIR@sha256:...), checked
// against the release's digest, for byoc plugin register.
func (a *app) readReleaseDescribe(ctx context.Context, arg string) ([]byte, *plugindist.Manifest, error) {
	ref, err := plugindist.ParseRef(arg)
	if err != nil {
		return nil, nil, err
	}
	repo, err := ocicopy.Open(ctx, ref.Registry, ref.Repository, a.vendorRegistryCreds())
	if err != nil {
		return nil, nil, err
	}
	defer repo.Close()
	m, err := plugindist.Read(ctx, repo, ref.Digest)
	if err != nil {
		return nil, nil, err
	}
	return m.Describe, m, nil
}
