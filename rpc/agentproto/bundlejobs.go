package agentproto

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// A bundle's jobs carry the install's sensitive values (inputs, secrets
// rendered into configs), and a bundle passes through the vendor's
// operator's hands, who may not read them (no operator answer carries a
// sensitive value). So the jobs travel sealed to the install's agent
// (jobs.sealed: agentchannel.SealTo, under BundleJobsInfo), beside a
// view anyone may read (jobs.json: the same jobs, every sensitive value
// masked, no signatures). imsd signs the pair (SignBundleJobs) when it
// makes them, and signs a bundle's manifest only for a pair it signed.
// The results file's copy of the jobs goes back sealed to imsd's key
// (ResultsJobsInfo) for the same reason.

const (
	bundleJobsContext  = "byoc bundle jobs v1\x00"
	resultsJobsContext = "byoc bundle results jobs v1\x00"
	// jobsPairContext binds imsd's signature over a view and its sealed
	// jobs.
	jobsPairContext = "byoc bundle jobs pair v3\x00"
	// Masked replaces each sensitive value in a bundle's readable view.
	Masked = "***"
)

// BundleJobsInfo is the HPKE info a bundle's jobs are sealed under, to
// agent agentID of install installID.
func BundleJobsInfo(installID, agentID string) []byte {
	return []byte(bundleJobsContext + installID + "\x00" + agentID)
}

// ResultsJobsInfo is the HPKE info a results file's jobs are sealed
// under, to imsd, by agent agentID of install installID.
func ResultsJobsInfo(installID, agentID string) []byte {
	return []byte(resultsJobsContext + installID + "\x00" + agentID)
}

// BundleJobsOf is what imsd's signature over a bundle's jobs binds them
// to: the bundle (its id, install, agent, revision and workflow kind),
// as CreateBundle made it. SignBundle signs a manifest only if it names
// the same, so nobody holding a bundle's jobs can give them another
// bundle's id (the agent keeps a bundle's results under its id, and
// orders bundles by it), another revision or another kind. It binds
// the agent's journal head imsd imported last (JournalSeq, JournalHash;
// 0, "": none) too: the agent's results file carries its journal after
// that head only, so nobody may move it.
type BundleJobsOf struct {
	InstallID, AgentID, BundleID string
	Revision                     int64
	WorkflowKind                 string
	JournalSeq                   int64
	JournalHash                  string
}

func jobsPair(of BundleJobsOf, view, sealed []byte) []byte {
	v, s := sha256.Sum256(view), sha256.Sum256(sealed)
	b := []byte(jobsPairContext)
	for _, f := range []string{of.InstallID, of.AgentID, of.BundleID, strconv.FormatInt(of.Revision, 10), of.WorkflowKind, strconv.FormatInt(of.JournalSeq, 10), of.JournalHash} {
		b = append(append(b, f...), 0)
	}
	b = append(b, v[:]...)
	return append(b, s[:]...)
}

// SignBundleJobs is imsd's signature over a bundle's readable view and
// its sealed jobs, for the bundle of.
func SignBundleJobs(key ed25519.PrivateKey, of BundleJobsOf, view, sealed []byte) []byte {
	return ed25519.Sign(key, jobsPair(of, view, sealed))
}

// VerifyBundleJobs reports whether sig is pub's SignBundleJobs.
func VerifyBundleJobs(pub ed25519.PublicKey, of BundleJobsOf, view, sealed, sig []byte) bool {
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, jobsPair(of, view, sealed), sig)
}

// BundleJobsView is jobs as anyone may read them: each config's
// sensitive values (its "sensitive" list) masked wherever they appear,
// and no signatures (a masked config would not verify anyway).
func BundleJobsView(jobs []BundleJob) ([]BundleJob, error) {
	out := make([]BundleJob, len(jobs))
	for i, j := range jobs {
		cfg, err := j.DecodeConfig()
		if err != nil {
			return nil, err
		}
		var secrets []string
		list, _ := cfg["sensitive"].([]any)
		for _, v := range list {
			if s, ok := v.(string); ok && s != "" {
				secrets = append(secrets, s)
			}
		}
		masked := maskValues(cfg, secrets)
		b, err := json.Marshal(masked)
		if err != nil {
			return nil, fmt.Errorf("job %s (step %s) config: %w", j.JobID, j.Step, err)
		}
		j.Config, j.Signature, j.KeyID = b, nil, ""
		out[i] = j
	}
	return out, nil
}

// maskValues returns v with every occurrence of each secret in its
// strings (keys included) replaced by Masked.
func maskValues(v any, secrets []string) any {
	secrets = slices.Clone(secrets)
	// The longest first: a secret inside another is masked with it.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	mask := func(s string) string {
		for _, x := range secrets {
			s = strings.ReplaceAll(s, x, Masked)
		}
		return s
	}
	switch t := v.(type) {
	case string:
		return mask(t)
	case []any:
		o := make([]any, len(t))
		for i, e := range t {
			o[i] = maskValues(e, secrets)
		}
		return o
	case map[string]any:
		o := make(map[string]any, len(t))
		for k, e := range t {
			o[mask(k)] = maskValues(e, secrets)
		}
		return o
	default:
		return v
	}
}

// CheckBundleJobsView checks that view (a bundle's jobs.json) is the readable
// view of jobs (its jobs.sealed, opened): the same jobs, in the same
// order, with the same configs but for the sensitive values masked. It
// names the first step that differs. The agent checks a bundle's pair
// so, and imsd a results file's jobs against the bundle's view it
// signed.
func CheckBundleJobsView(view []byte, jobs []BundleJob) error {
	want, err := BundleJobsView(jobs)
	if err != nil {
		return fmt.Errorf("jobs.sealed: %w", err)
	}
	var got []BundleJob
	if err := json.Unmarshal(view, &got); err != nil {
		return fmt.Errorf("jobs.json: %w", err)
	}
	if len(got) != len(want) {
		return fmt.Errorf("jobs.json lists %d jobs and jobs.sealed holds %d", len(got), len(want))
	}
	norm := func(j BundleJob) (any, error) {
		b, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		var v any
		err = json.Unmarshal(b, &v)
		return v, err
	}
	for i := range want {
		g, err := norm(got[i])
		if err != nil {
			return fmt.Errorf("jobs.json: %w", err)
		}
		w, err := norm(want[i])
		if err != nil {
			return fmt.Errorf("jobs.sealed: %w", err)
		}
		if !reflect.DeepEqual(g, w) {
			return fmt.Errorf("jobs.json: step %s (job %s) is not the job jobs.sealed holds (step %s, job %s): what you read is not what would run", got[i].Step, got[i].JobID, want[i].Step, want[i].JobID)
		}
	}
	return nil
}
