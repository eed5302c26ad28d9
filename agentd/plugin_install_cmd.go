package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
)

// installCmd runs "agentd plugin install REF": the release REF in the
// vendor registry is copied into the install registry, read back from
// there and verified (digest, signature by one of imsd's keys), its
// binary installed under STATE/plugins and pinned. Nothing is installed
// or pinned unless every check passed.
func installCmd(ctx context.Context, stateDir, registry, platform, refArg string, stdout, stderr io.Writer, now time.Time) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "agentd plugin install: %v\n", err)
		return 1
	}
	id, err := identity.Load(stateDir)
	if err != nil {
		return fail(fmt.Errorf("the agent's identity holds the imsd keys a release's signature is checked with: %w", err))
	}
	ref, err := plugindist.ParseRef(refArg)
	if err != nil {
		return fail(err)
	}
	if registry == "" {
		registry = "oci:" + filepath.Join(stateDir, "registry")
	}
	reg, err := ocicopy.ParseRegistry(registry)
	if err != nil {
		return fail(fmt.Errorf("--install-registry: %w", err))
	}
	vendorCreds := ocicopy.CredentialsFromEnv(map[string]string{
		"BYOC_VENDOR_REGISTRY_USERNAME": os.Getenv("BYOC_VENDOR_REGISTRY_USERNAME"),
		"BYOC_VENDOR_REGISTRY_PASSWORD": os.Getenv("BYOC_VENDOR_REGISTRY_PASSWORD"),
		"BYOC_VENDOR_REGISTRY_TOKEN":    os.Getenv("BYOC_VENDOR_REGISTRY_TOKEN"),
	}, "BYOC_VENDOR_REGISTRY")
	installCreds := ocicopy.CredentialsFromEnv(map[string]string{
		"BYOC_INSTALL_REGISTRY_USERNAME": os.Getenv("BYOC_INSTALL_REGISTRY_USERNAME"),
		"BYOC_INSTALL_REGISTRY_PASSWORD": os.Getenv("BYOC_INSTALL_REGISTRY_PASSWORD"),
		"BYOC_INSTALL_REGISTRY_TOKEN":    os.Getenv("BYOC_INSTALL_REGISTRY_TOKEN"),
	}, "BYOC_INSTALL_REGISTRY")
	src, err := ocicopy.Open(ctx, ref.Registry, ref.Repository, vendorCreds)
	if err != nil {
		return fail(err)
	}
	defer src.Close()
	dst, err := ocicopy.Open(ctx, reg, ref.Repository, installCreds)
	if err != nil {
		return fail(err)
	}
	defer dst.Close()
	// Custody: the release, with its signatures (referrers), goes into
	// the install registry by digest, and is installed from there.
	if ref.Registry != reg {
		if _, err := ocicopy.Copy(ctx, src, dst, ref.Digest, ocicopy.Options{}); err != nil {
			return fail(fmt.Errorf("copy %s into the install registry %s: %w", refArg, reg, err))
		}
	}
	inst := ocicopy.Reference{Registry: reg, Repository: ref.Repository, Digest: ref.Digest}
	m, err := plugindist.Read(ctx, dst, ref.Digest)
	if err != nil {
		return fail(err)
	}
	keyID, err := plugindist.Verify(ctx, dst, m, id.IMSDKeys)
	if err != nil {
		return fail(fmt.Errorf("refused: %w", err))
	}
	bin, err := plugindist.FetchBinary(ctx, dst, m, platform)
	if err != nil {
		return fail(fmt.Errorf("refused: %w", err))
	}
	root := filepath.Join(stateDir, pluginhost.InstallDirName)
	path, sum, err := pluginhost.InstallBinary(root, m.Type, bin)
	if err != nil {
		return fail(err)
	}
	pinPath := filepath.Join(stateDir, pluginhost.PinFileName)
	pf, err := pluginhost.ReadPins(pinPath)
	if err != nil {
		return fail(fmt.Errorf("%w; fix or remove it, then install again", err))
	}
	old := pf.Pins[m.Type]
	pf.Pins[m.Type] = pluginhost.Pin{SHA256: sum, PinnedAt: now.UTC(), PinnedBy: whoami(), Source: ref.String(),
		Installed: path, OCI: inst.String(), Version: m.Version, SignedBy: keyID}
	if err := pluginhost.WritePins(pinPath, pf); err != nil {
		return fail(err)
	}
	if err := pluginhost.PruneInstalled(root, m.Type, path); err != nil {
		fmt.Fprintf(stderr, "agentd plugin install: removing older versions of %s: %v\n", m.Type, err)
	}
	fmt.Fprintf(stdout, "installed %s %s (%s, %s) from %s\n", m.Type, m.Version, m.Descriptor.Digest, platform, inst)
	fmt.Fprintf(stdout, "signature by imsd key %s verified; pinned %s: %s", keyID, m.Type, sum)
	if old.SHA256 != "" && old.SHA256 != sum {
		fmt.Fprintf(stdout, " (was %s %s)", old.Version, old.SHA256)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "a running agentd runs it from its next job of that type (no restart)")
	return 0
}
