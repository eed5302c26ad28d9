package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
)

// releaseInstaller installs plugin releases from the install registry:
// read back and verified (every digest, a signature by one of imsd's
// keys), the binary for this machine installed under STATE/plugins and
// pinned. Nothing is installed or pinned unless every check passed.
type releaseInstaller struct {
	stateDir string
	// registry is the install registry and creds its credentials.
	registry ocicopy.Registry
	creds    ocicopy.Credentials
	platform string
	trusted  []ed25519.PublicKey
	by       string
	now      func() time.Time
	// mu serialises the agent's own installs (pinned releases fetched
	// when a job needs them).
	mu sync.Mutex
}

// installed is what install did.
type installed struct {
	m        *plugindist.Manifest
	pin, old pluginhost.Pin
	at       ocicopy.Reference
}

// install verifies the release repository@dg in the install registry,
// installs its binary and pins it. typ, if set, is the type the release
// must be of; want, if set, the binary's pinned SHA-256. source is what
// the pin records as where it came from.
func (ri *releaseInstaller) install(ctx context.Context, repository string, dg digest.Digest, typ, want, source string) (installed, error) {
	repo, err := ocicopy.Open(ctx, ri.registry, repository, ri.creds)
	if err != nil {
		return installed{}, err
	}
	defer repo.Close()
	at := ocicopy.Reference{Registry: ri.registry, Repository: repository, Digest: dg}
	m, err := plugindist.Read(ctx, repo, dg)
	if err != nil {
		return installed{}, err
	}
	if typ != "" && m.Type != typ {
		return installed{}, &pluginhost.RefusedError{Version: m.Version, Type: m.Type, Err: fmt.Errorf("the release %s is a plugin of type %s, pinned for type %s", at, m.Type, typ)}
	}
	keyID, err := plugindist.Verify(ctx, repo, m, ri.trusted)
	if err != nil {
		return installed{}, &pluginhost.RefusedError{Version: m.Version, Type: m.Type, Err: err}
	}
	bin, err := plugindist.FetchBinary(ctx, repo, m, ri.platform)
	if err != nil {
		return installed{}, &pluginhost.RefusedError{Version: m.Version, Type: m.Type, Err: err}
	}
	if h := sha256.Sum256(bin); want != "" && want != hex.EncodeToString(h[:]) {
		return installed{}, &pluginhost.RefusedError{Version: m.Version, Type: m.Type, Err: fmt.Errorf("plugin %s %s (%s): its %s binary has sha256 %x, but the pin says %s", m.Type, m.Version, dg, ri.platform, h, want)}
	}
	root := filepath.Join(ri.stateDir, pluginhost.InstallDirName)
	path, sum, err := pluginhost.InstallBinary(root, m.Type, bin)
	if err != nil {
		return installed{}, err
	}
	pin := pluginhost.Pin{SHA256: sum, PinnedAt: ri.now().UTC(), PinnedBy: ri.by, Source: source,
		Installed: path, OCI: at.String(), Version: m.Version, SignedBy: keyID}
	var old pluginhost.Pin
	err = pluginhost.UpdatePins(filepath.Join(ri.stateDir, pluginhost.PinFileName), func(pf *pluginhost.PinFile, rerr error) error {
		if rerr != nil {
			return fmt.Errorf("%w; fix or remove it, then install again", rerr)
		}
		old = pf.Pins[m.Type]
		if typ != "" {
			// A release the customer pinned, now fetched: the pin must
			// still name it, and who pinned it and when stay the
			// customer's.
			if old.OCI != source {
				return fmt.Errorf("the pin of %s changed while its release %s was installed; the next job uses the new pin", typ, source)
			}
			pin.PinnedAt, pin.PinnedBy, pin.OCI = old.PinnedAt, old.PinnedBy, old.OCI
		}
		pf.Pins[m.Type] = pin
		return nil
	})
	if err != nil {
		return installed{}, err
	}
	if err := pluginhost.PruneInstalled(root, m.Type, path); err != nil {
		return installed{m: m, pin: pin, old: old, at: at}, fmt.Errorf("removing older versions of %s: %w", m.Type, err)
	}
	return installed{m: m, pin: pin, old: old, at: at}, nil
}

// fetch is the loader's Fetch: the release pinned for typ (agentd plugin
// pin TYPE --release), read from the install registry, verified,
// installed and its pin completed.
func (ri *releaseInstaller) fetch(ctx context.Context, typ string, p pluginhost.Pin) (pluginhost.Pin, error) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	if ri.trusted == nil {
		// The keys as the agent holds them now (a rotation adds some).
		id, err := identity.Load(ri.stateDir)
		if err != nil {
			return pluginhost.Pin{}, err
		}
		ri.trusted = id.IMSDKeys
		defer func() { ri.trusted = nil }()
	}
	ref, err := plugindist.ParseRef(p.OCI)
	if err != nil {
		return pluginhost.Pin{}, fmt.Errorf("its pinned release: %w", err)
	}
	repository := ref.Repository
	if ref.Registry.IsLayout() {
		// oci:DIR names the layout DIR; in a layout install registry,
		// its repository is DIR's path below the registry's root.
		rel, err := filepath.Rel(ri.registry.LayoutRoot, filepath.Join(ref.Registry.LayoutRoot, ref.Repository))
		if !ri.registry.IsLayout() || err != nil || !filepath.IsLocal(rel) {
			return pluginhost.Pin{}, fmt.Errorf("its pinned release %s is not in the install registry %s", p.OCI, ri.registry)
		}
		repository = filepath.ToSlash(rel)
	}
	res, err := ri.install(ctx, repository, ref.Digest, typ, p.SHA256, p.OCI)
	if res.m == nil {
		return pluginhost.Pin{}, err
	}
	return res.pin, nil
}

// installCmd runs "agentd plugin install REF": the release REF is copied
// into the install registry (unless it is there already) by digest with
// its signatures, then installed from there.
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
	ri := &releaseInstaller{stateDir: stateDir, registry: reg, creds: credsFromEnv("BYOC_INSTALL_REGISTRY"),
		platform: platform, trusted: id.IMSDKeys, by: whoami(), now: func() time.Time { return now }}
	// A failure that is a refusal of the release itself (not of the
	// registry's reachability) is also recorded in the agent's journal.
	refuse := func(err error) int {
		code := fail(err)
		if !isRefusal(err) {
			return code
		}
		if jerr := journalInstallRefusal(stateDir, id.AgentID, ref, ri.by, err, now); jerr != nil {
			fmt.Fprintf(stderr, "agentd plugin install: the refusal could not be recorded in the agent's journal: %v\n", jerr)
		} else {
			fmt.Fprintf(stderr, "agentd plugin install: the refusal is recorded in the agent's journal (%s; agentd audit)\n", agent.KindSupplyChainRefused)
		}
		return code
	}
	// Custody: the release, with its signatures (referrers), goes into
	// the install registry by digest, and is installed from there.
	if ref.Registry != reg {
		src, err := ocicopy.Open(ctx, ref.Registry, ref.Repository, credsFromEnv("BYOC_VENDOR_REGISTRY"))
		if err != nil {
			return fail(err)
		}
		defer src.Close()
		dst, err := ocicopy.Open(ctx, reg, ref.Repository, ri.creds)
		if err != nil {
			return fail(err)
		}
		defer dst.Close()
		if _, err := ocicopy.Copy(ctx, src, dst, ref.Digest, ocicopy.Options{RefuseImageReferrers: true}); err != nil {
			return refuse(fmt.Errorf("copy %s into the install registry %s: %w", refArg, reg, err))
		}
	}
	res, err := ri.install(ctx, ref.Repository, ref.Digest, "", "", ref.String())
	if res.m == nil {
		return refuse(err)
	} else if err != nil {
		fmt.Fprintf(stderr, "agentd plugin install: %v\n", err)
	}
	fmt.Fprintf(stdout, "installed %s %s (%s, %s) from %s\n", res.m.Type, res.m.Version, res.m.Descriptor.Digest, platform, res.at)
	fmt.Fprintf(stdout, "signature by imsd key %s verified; pinned %s: %s", res.pin.SignedBy, res.m.Type, res.pin.SHA256)
	if res.old.SHA256 != "" && res.old.SHA256 != res.pin.SHA256 {
		fmt.Fprintf(stdout, " (was %s %s)", res.old.Version, res.old.SHA256)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "a running agentd runs it from its next job of that type (no restart)")
	return 0
}

// isRefusal reports whether err refuses a release for what it is (its
// signature, a digest, its type, not a plugin release), rather than
// failing to reach it.
func isRefusal(err error) bool {
	return errors.Is(err, pluginhost.ErrRefused) || errors.Is(err, plugindist.ErrNotRelease) || errors.Is(err, ocicopy.ErrDigestMismatch)
}

// journalInstallRefusal records in the agent's journal (STATE/audit/
// agent.jsonl) that agentd plugin install refused the release ref, as the
// running agent records its refusal of a pinned release
// (supply_chain.refused, subject plugin:TYPE, rule release; subject
// plugin-release:REF when the type was not read), with who asked
// (installed_by) and the command. The journal takes records from the
// running agent and from this command at once (auditlog's lock). It is
// not kept in STATE/plugin-refusals.json: that file holds the refusals
// of the releases the pins name, and a refused install changes no pin.
func journalInstallRefusal(stateDir, agentID string, ref ocicopy.Reference, by string, err error, now time.Time) error {
	var typ, version string
	if re := (*pluginhost.RefusedError)(nil); errors.As(err, &re) {
		typ, version = re.Type, re.Version
	}
	subject := "plugin:" + typ
	if typ == "" {
		subject = "plugin-release:" + ref.String()
	}
	data, err2 := auditlog.EncodeData(map[string]string{"type": typ, "artifact": ref.String(), "digest": ref.Digest.String(),
		"version": version, "rule": agent.RulePluginRelease, "reason": strings.TrimPrefix(err.Error(), pluginhost.ErrRefused.Error()+": "),
		"installed_by": by, "command": "agentd plugin install"})
	if err2 != nil {
		return err2
	}
	j, err := auditlog.Open(filepath.Join(auditlog.Dir(stateDir), auditlog.AgentFile), auditlog.AgentChain(agentID))
	if err != nil {
		return err
	}
	defer j.Close()
	_, err = j.Add(auditchain.Record{At: now.UnixNano(), Kind: agent.KindSupplyChainRefused, Actor: "agent:" + agentID, Subject: subject, Data: data})
	return err
}

// credsFromEnv reads a registry's credentials from PREFIX_USERNAME,
// _PASSWORD and _TOKEN in the environment.
func credsFromEnv(prefix string) ocicopy.Credentials {
	env := map[string]string{}
	for _, k := range []string{"_USERNAME", "_PASSWORD", "_TOKEN"} {
		env[prefix+k] = os.Getenv(prefix + k)
	}
	return ocicopy.CredentialsFromEnv(env, prefix)
}
