package agentproto

import (
	"crypto/ed25519"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Offline bundles (byoc bundle create, agentd bundle import). A bundle
// carries an install's workflow as jobs imsd signed exactly as it signs
// the assignments it hands out (JobClaims, for the install's agent,
// attempt 1), and a manifest of every file of the bundle with its
// SHA-256, signed by imsd's key behind its own context string: no job
// signature or update offer can pass for a manifest's, nor the other way
// round. The agent checks both against the keys it pinned at enrolment
// (identity.IMSDKeys), with no connection to imsd.

// bundleContext binds a bundle manifest's signature to its purpose.
const bundleContext = "byoc bundle manifest v1\x00"

// resultsContext binds the signature of a results file (agentd bundle
// export-results) to its purpose; the agent signs it with its own key.
const resultsContext = "byoc bundle results v1\x00"

// MaxBundleValidity is the longest imsd signs a bundle's jobs for
// (byoc bundle create --valid-for). The agent runs no expired job, so
// the results of a bundle's jobs are all made within it of the bundle;
// imsd keeps a replaced signing key for its results that long and a
// margin (auth.PreviousKeyUse).
const MaxBundleValidity = 90 * 24 * time.Hour

// bundleIDRE is a bundle id as imsd makes them (auth.NewSortableID
// "bdl_"): its millisecond and random bits in sortable base32.
var bundleIDRE = regexp.MustCompile(`^bdl_[0-9a-v]{26}$`)

// ValidBundleID reports whether id is a bundle id as imsd makes them:
// safe as a file name, and sorting by the time imsd made it.
func ValidBundleID(id string) bool { return bundleIDRE.MatchString(id) }

// sortableIDRE is an id auth.NewSortableID makes: a prefix, then 16
// bytes in lower-case base32hex, the first 48 bits imsd's clock in Unix
// milliseconds.
var sortableIDRE = regexp.MustCompile(`^[a-z]+_[0-9a-v]{26}$`)

// IDTime is when imsd made id (a bundle's, a job's: auth.NewSortableID),
// read from the id itself; false for an id not of that form (one a test
// or an older imsd made). imsd signs the ids it makes (a job's in its
// claims, a bundle's with its jobs), so the time is imsd's word.
func IDTime(id string) (time.Time, bool) {
	if !sortableIDRE.MatchString(id) {
		return time.Time{}, false
	}
	_, enc, _ := strings.Cut(id, "_")
	b, err := base32.HexEncoding.WithPadding(base32.NoPadding).DecodeString(strings.ToUpper(enc))
	if err != nil || len(b) != 16 {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:8]) >> 16)).UTC(), true
}

// SignBundleManifest signs a bundle manifest's bytes with imsd's key.
func SignBundleManifest(key ed25519.PrivateKey, manifest []byte) []byte {
	return ed25519.Sign(key, append([]byte(bundleContext), manifest...))
}

// VerifyBundleManifest checks sig, made by the key keyID names, over
// manifest: keys are the keys the verifier trusts by id.
func VerifyBundleManifest(keys map[string]ed25519.PublicKey, keyID string, manifest, sig []byte) error {
	if len(sig) == 0 {
		return fmt.Errorf("bundle manifest: %w", ErrUnsigned)
	}
	pub, ok := keys[keyID]
	if !ok || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("bundle manifest: %w %q (this agent trusts %s)", ErrUnknownKey, keyID, strings.Join(sortedKeys(keys), ", "))
	}
	if !ed25519.Verify(pub, append([]byte(bundleContext), manifest...), sig) {
		return fmt.Errorf("bundle manifest: the signature does not match the manifest (tampered with, or not signed by imsd)")
	}
	return nil
}

// SignBundleResults signs a results file's manifest with the agent's key.
func SignBundleResults(key ed25519.PrivateKey, manifest []byte) []byte {
	return ed25519.Sign(key, append([]byte(resultsContext), manifest...))
}

// VerifyBundleResults checks an agent's signature over a results file's
// manifest.
func VerifyBundleResults(pub ed25519.PublicKey, manifest, sig []byte) bool {
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, append([]byte(resultsContext), manifest...), sig)
}

func sortedKeys(m map[string]ed25519.PublicKey) []string { return slices.Sorted(maps.Keys(m)) }

// BundleJob is one step of a bundle's workflow: a job signed for one
// agent, as the bundle's jobs.json lists it, in an order that respects
// Needs (the names of the steps that must succeed first).
type BundleJob struct {
	Step           string          `json:"step"`
	Needs          []string        `json:"needs,omitempty"`
	JobID          string          `json:"job_id"`
	InstallID      string          `json:"install_id"`
	Attempt        int64           `json:"attempt"`
	FencingToken   int64           `json:"fencing_token"`
	Mode           string          `json:"mode"`
	Component      string          `json:"component,omitempty"`
	ComponentType  string          `json:"component_type"`
	Operation      string          `json:"operation"`
	TimeoutSeconds int64           `json:"timeout_seconds"`
	Config         json.RawMessage `json:"config"`
	KeyID          string          `json:"key_id"`
	ExpireUnixMs   int64           `json:"expire_unix_ms"`
	Signature      []byte          `json:"signature"`
	WindowBound    bool            `json:"window_bound,omitempty"`
}

// DecodeConfig decodes a bundle job's config as the agent sees an
// assignment's (numbers as float64).
func (j *BundleJob) DecodeConfig() (map[string]any, error) {
	var cfg map[string]any
	if len(j.Config) == 0 {
		return map[string]any{}, nil
	}
	if err := json.Unmarshal(j.Config, &cfg); err != nil {
		return nil, fmt.Errorf("job %s (step %s) config: %w", j.JobID, j.Step, err)
	}
	return cfg, nil
}

// Claims is what j's signature covers, for agent agentID.
func (j *BundleJob) Claims(agentID string, config map[string]any) (JobClaims, error) {
	digest, err := ConfigDigest(config)
	if err != nil {
		return JobClaims{}, err
	}
	return JobClaims{KeyID: j.KeyID, InstallID: j.InstallID, AgentID: agentID, JobID: j.JobID, Attempt: j.Attempt,
		FencingToken: j.FencingToken, Mode: j.Mode, Component: j.Component, ComponentType: j.ComponentType,
		Operation: j.Operation, TimeoutSeconds: j.TimeoutSeconds, ConfigDigest: digest,
		Expires: time.UnixMilli(j.ExpireUnixMs), WindowBound: j.WindowBound}, nil
}

// Verify checks j's signature for agent agentID with the keys trusted,
// and returns its config decoded.
func (j *BundleJob) Verify(keys map[string]ed25519.PublicKey, agentID string, now time.Time) (map[string]any, error) {
	cfg, err := j.DecodeConfig()
	if err != nil {
		return nil, err
	}
	c, err := j.Claims(agentID, cfg)
	if err != nil {
		return nil, fmt.Errorf("job %s (step %s): %w", j.JobID, j.Step, err)
	}
	if err := VerifyJob(keys, &c, j.Signature, now); err != nil {
		return nil, fmt.Errorf("job %s (step %s): %w", j.JobID, j.Step, err)
	}
	return cfg, nil
}

// OutputRef is how a reference to another component's output stays in
// a bundle job's config: imsd cannot know the output (the component is
// deployed by the same bundle, on the agent), so the agent renders it
// from the results of the bundle's earlier jobs. Sandbox outputs are
// the outputs of the component named "sandbox".
func OutputRef(component, output string) string {
	if component == "sandbox" {
		return "{{ .sandbox.outputs." + output + " }}"
	}
	return "{{ .components." + component + ".outputs." + output + " }}"
}

// outputRefRE matches OutputRef's output; groups: the component (empty
// for the sandbox's references) and the output.
var outputRefRE = regexp.MustCompile(`\{\{-?\s*\.(?:sandbox|components\.([a-z0-9][a-z0-9_-]*))\.outputs\.([A-Za-z_][A-Za-z0-9_-]*)\s*-?\}\}`)

// ReplaceOutputs replaces every output reference in s with
// lookup(component, output); a reference lookup does not know is an
// error naming it.
func ReplaceOutputs(s string, lookup func(component, output string) (string, bool)) (string, error) {
	var missing string
	out := outputRefRE.ReplaceAllStringFunc(s, func(m string) string {
		g := outputRefRE.FindStringSubmatch(m)
		comp := g[1]
		if comp == "" {
			comp = "sandbox"
		}
		v, ok := lookup(comp, g[2])
		if !ok {
			if missing == "" {
				missing = comp + "." + g[2]
			}
			return m
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("output %s is not known: the bundle's earlier jobs did not report it", missing)
	}
	return out, nil
}

// RenderOutputs replaces the output references in every string of v (a
// decoded JSON value), returning the rendered copy.
func RenderOutputs(v any, lookup func(component, output string) (string, bool)) (any, error) {
	switch x := v.(type) {
	case string:
		if !strings.Contains(x, "{{") {
			return x, nil
		}
		return ReplaceOutputs(x, lookup)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := RenderOutputs(e, lookup)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := RenderOutputs(e, lookup)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

// BundleArtifact is an artifact a bundle's job reads, which the bundle
// carries: repository Repository of the vendor registry at Digest (as the
// bundle's layout holds it), loaded into repository Target of the
// install registry. Field is the config field naming it.
type BundleArtifact struct {
	Field, Repository, Target, Digest string
}

// Artifact is the artifact j deploys that a bundle carries: an image's
// source (a build of the vendor registry, loaded into the install
// registry at the job's repository, default the same name); a Helm
// chart's chart or a Terraform module's module when it names a
// repository of the install registry by digest (REPOSITORY@sha256:...),
// which the bundle carries from the same repository of the vendor
// registry (where byoc build package put it). ok is false for a destroy,
// another type, or a chart or module read from elsewhere (an OCI layout
// on the agent, another registry, a directory). An image job with no
// build reference is an error.
func (j *BundleJob) Artifact() (a BundleArtifact, ok bool, err error) {
	if j.Operation == "destroy" {
		return a, false, nil
	}
	field := map[string]string{ImageType: ImageSourceKey, "helm": "chart", "terraform": "module"}[j.ComponentType]
	if field == "" {
		return a, false, nil
	}
	cfg, err := j.DecodeConfig()
	if err != nil {
		return a, false, err
	}
	ref, _ := cfg[field].(string)
	repo, dg, perr := ParseBuildRef(ref)
	if j.ComponentType != ImageType {
		if ref == "" || perr != nil {
			return a, false, nil
		}
		return BundleArtifact{Field: field, Repository: repo, Target: repo, Digest: dg}, true, nil
	}
	if perr != nil {
		return a, false, fmt.Errorf("step %s: %w", j.Step, perr)
	}
	target := repo
	if r, _ := cfg["repository"].(string); r != "" {
		target = r
	}
	return BundleArtifact{Field: field, Repository: repo, Target: target, Digest: dg}, true, nil
}
