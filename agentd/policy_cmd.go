package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

const policyUsage = `usage: agentd policy --state-dir DIR supply-chain [--require-signature|--no-require-signature] [--mode refuse|warn] [--key FILE]... [--no-keys] [--no-imsd-keys|--imsd-keys]
    [--require-attestation slsa-provenance[:level>=N]|sbom]... [--no-require-attestations]
    [--deny-vulnerabilities low|medium|high|critical|none] [--warn-on RULE]... [--no-warn-on]
    [--identity issuer=URL,subject=REGEX]... [--no-identities] [--trusted-root FILE]

The customer's supply-chain policy, kept in permissions.json (signed like
the permission modes; imsd cannot change it). With no flags it is shown.

Under --require-signature the agent checks, before every plan and apply of
an image, helm or terraform component, that the artifact's digest carries
a signature by imsd's keys the agent pinned at enrolment (or a --key), or
a keyless signature by an --identity; in mode refuse (the default) a job
without one fails before its plugin runs, in mode warn it is logged and
audited and runs. --no-imsd-keys trusts your --key keys and --identity
signers only: a signature or attestation by imsd's key (which whoever
holds imsd can make) then counts for nothing.

--require-attestation requires an in-toto attestation attached to the
artifact and signed by a trusted key: SLSA provenance (the build agent's;
level>=N asks for SLSA Build level N, and the build agent's signed
provenance is level 2) or an SBOM. --deny-vulnerabilities SEVERITY refuses
an artifact whose attached vulnerability scan (cosign's vuln predicate,
signed by a trusted key) lists one at or above SEVERITY, or that has no
scan. The mode applies to every rule; in mode refuse, --warn-on RULE
makes one rule warn only.

--identity trusts a keyless signer beside the keys, for the signature
and for attestations: a signature or an attestation whose Sigstore bundle
carries a certificate counts when the certificate chains to a certificate
authority of --trusted-root, the signature carries an RFC 3161 timestamp
from one of its timestamp authorities within the certificate's validity,
the certificate names the identity, and it is of the artifact's digest.

flags:
`

// keyFiles is a repeatable --key.
type keyFiles []string

func (k *keyFiles) String() string     { return strings.Join(*k, ",") }
func (k *keyFiles) Set(v string) error { *k = append(*k, v); return nil }

// policyCmd runs "agentd policy ...".
func policyCmd(args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("agentd policy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), policyUsage); fs.PrintDefaults() }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	require := fs.Bool("require-signature", false, "require a trusted signature on every image, chart and module deployed")
	noRequire := fs.Bool("no-require-signature", false, "require none")
	mode := fs.String("mode", "", "what an unsigned artifact gets: refuse (the job fails) or warn (logged and audited; the job runs)")
	var keys keyFiles
	fs.Var(&keys, "key", "a further trusted Ed25519 public key `file` (PEM PUBLIC KEY or base64); repeatable; replaces the keys set before")
	noKeys := fs.Bool("no-keys", false, "trust imsd's pinned keys only")
	noIMSDKeys := fs.Bool("no-imsd-keys", false, "trust your --key keys and --identity signers only, not imsd's keys: what a compromised imsd signs then passes no rule")
	imsdKeys := fs.Bool("imsd-keys", false, "trust imsd's pinned keys again (the default)")
	var attests keyFiles
	fs.Var(&attests, "require-attestation", "an attestation every artifact must carry: slsa-provenance, slsa-provenance:level>=N or sbom; repeatable; replaces the ones set before")
	noAttests := fs.Bool("no-require-attestations", false, "require no attestation")
	var warnOn keyFiles
	fs.Var(&warnOn, "warn-on", "in mode refuse, only warn when this `rule` is not met: require-signature, require-attestation, \"require-attestation sbom\" or deny-vulnerabilities; repeatable; replaces the ones set before")
	noWarnOn := fs.Bool("no-warn-on", false, "refuse on every rule (in mode refuse)")
	var idents keyFiles
	fs.Var(&idents, "identity", "a keyless signer whose signatures and attestations count beside the keys: issuer=URL,subject=REGEX (the certificate's OIDC issuer exactly, its subject by the whole expression); needs --trusted-root; repeatable; replaces the ones set before")
	noIdents := fs.Bool("no-identities", false, "trust no keyless signer")
	trustedRoot := fs.String("trusted-root", "", "the Sigstore trusted root `file` (trusted_root.json: certificate and RFC 3161 timestamp authorities) keyless signatures are verified against; copied into the policy")
	denyVulns := fs.String("deny-vulnerabilities", "", "refuse an artifact whose signed vulnerability scan lists one of this `severity` or above (low, medium, high, critical), or that has none; none: no such rule")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	if len(words) != 1 || words[0] != "supply-chain" {
		fmt.Fprintf(stderr, "agentd policy: unknown command %q; the one policy is supply-chain\n", strings.Join(words, " "))
		return 2
	}
	dir, code := stateDirArg("agentd policy", *stateDir, stderr)
	if code != 0 {
		return code
	}
	if *require && *noRequire {
		fmt.Fprintln(stderr, "agentd policy supply-chain: give --require-signature or --no-require-signature, not both")
		return 2
	}
	if len(keys) > 0 && *noKeys {
		fmt.Fprintln(stderr, "agentd policy supply-chain: give --key or --no-keys, not both")
		return 2
	}
	if *noIMSDKeys && *imsdKeys {
		fmt.Fprintln(stderr, "agentd policy supply-chain: give --no-imsd-keys or --imsd-keys, not both")
		return 2
	}
	if len(warnOn) > 0 && *noWarnOn {
		fmt.Fprintln(stderr, "agentd policy supply-chain: give --warn-on or --no-warn-on, not both")
		return 2
	}
	if len(attests) > 0 && *noAttests {
		fmt.Fprintln(stderr, "agentd policy supply-chain: give --require-attestation or --no-require-attestations, not both")
		return 2
	}
	st, err := permissions.Load(dir)
	if err != nil {
		fmt.Fprintf(stderr, "agentd policy supply-chain: %v\n", err)
		return 1
	}
	if *require || *noRequire || *mode != "" || len(keys) > 0 || *noKeys || len(attests) > 0 || *noAttests || *denyVulns != "" || len(warnOn) > 0 || *noWarnOn || len(idents) > 0 || *noIdents || *trustedRoot != "" || *noIMSDKeys || *imsdKeys {
		p := st.SupplyChain
		if *noIMSDKeys || *imsdKeys {
			p.NoIMSDKeys = *noIMSDKeys
		}
		if len(idents) > 0 || *noIdents {
			p.Identities = slices.Clone([]string(idents))
		}
		if *noIdents {
			p.TrustedRoot = nil
		}
		if *trustedRoot != "" {
			if _, err := attest.LoadTrustedRoot(*trustedRoot); err != nil {
				fmt.Fprintf(stderr, "agentd policy supply-chain: --trusted-root: %v\n", err)
				return 2
			}
			b, _ := os.ReadFile(*trustedRoot)
			var c bytes.Buffer
			if err := json.Compact(&c, b); err != nil {
				fmt.Fprintf(stderr, "agentd policy supply-chain: --trusted-root %s: %v\n", *trustedRoot, err)
				return 2
			}
			p.TrustedRoot = c.Bytes()
		}
		if len(warnOn) > 0 || *noWarnOn {
			p.WarnOn = slices.Clone([]string(warnOn))
		}
		if len(attests) > 0 || *noAttests {
			p.RequireAttestations = slices.Clone([]string(attests))
		}
		switch *denyVulns {
		case "":
		case "none":
			p.DenyVulnerabilities = ""
		default:
			p.DenyVulnerabilities = *denyVulns
		}
		if *require || *noRequire {
			p.RequireSignature = *require
		}
		if *mode != "" {
			p.Mode = *mode
		}
		if *noKeys {
			p.Keys = nil
		}
		if len(keys) > 0 {
			p.Keys = nil
			for _, f := range keys {
				b, err := os.ReadFile(f)
				if err != nil {
					fmt.Fprintf(stderr, "agentd policy supply-chain: --key: %v\n", err)
					return 2
				}
				k, err := permissions.ParsePublicKey(b)
				if err != nil {
					fmt.Fprintf(stderr, "agentd policy supply-chain: --key %s: %v\n", f, err)
					return 2
				}
				p.Keys = append(p.Keys, k)
			}
		}
		if err := p.Check(); err != nil {
			fmt.Fprintf(stderr, "agentd policy supply-chain: --%v\n", err)
			return 2
		}
		if st, err = permissions.Update(dir, now(), whoami(), func(s *permissions.State) { s.SupplyChain = p }); err != nil {
			fmt.Fprintf(stderr, "agentd policy supply-chain: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "Supply-chain policy of the agent in %s: %s\n", dir, st.SupplyChain)
	if id, err := identity.Load(dir); err == nil && !st.SupplyChain.NoIMSDKeys {
		for _, k := range id.IMSDKeys {
			fmt.Fprintf(stdout, "  trusted: imsd key %s (pinned at enrolment)\n", agentproto.KeyID(k))
		}
	}
	extra, _ := st.SupplyChain.PublicKeys()
	for _, k := range extra {
		fmt.Fprintf(stdout, "  trusted: key %s (--key)\n", agentproto.KeyID(k))
	}
	for _, id := range st.SupplyChain.Identities {
		fmt.Fprintf(stdout, "  trusted: keyless identity %s (--identity, under the --trusted-root)\n", id)
	}
	return 0
}
