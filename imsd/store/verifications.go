// Artifact verifications: what an install's agent verified of each
// component's artifact under the customer's supply-chain policy, as its
// jobs' results reported it (FinishJob).

package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ArtifactVerification is what an agent verified of one artifact before
// a job (agentd policy supply-chain).
type ArtifactVerification struct {
	// Artifact is the reference the job's config named; Digest its
	// digest.
	Artifact string
	Digest   string
	// KeyID is the trusted key whose signature verified; empty: none.
	KeyID string
	// Attestations are the predicate types that verified.
	Attestations []string
	// Verdict is verified, warned or refused.
	Verdict string
	// Failed are the rules not met, each "RULE: why".
	Failed []string
	// JobID and VerifiedAt: the job whose result reported it, and when
	// imsd stored it (set by the store).
	JobID      string
	VerifiedAt time.Time
}

// Verdicts an agent reports.
var verdicts = []string{"verified", "warned", "refused"}

// recordVerifications stores the verifications of job jobID (of install
// install) as its component's latest, and adds the first one's verdict
// and failed rules to the job's audit record's data.
func (s *Store) recordVerifications(ctx context.Context, tx *txn, jobID, install string, vs []ArtifactVerification, now time.Time, audit map[string]string) error {
	if len(vs) == 0 {
		return nil
	}
	var component string
	if err := tx.GetContext(ctx, &component, s.bind(`SELECT component FROM jobs WHERE id = ?`), jobID); err != nil {
		return fmt.Errorf("job %s component: %w", jobID, err)
	}
	v := vs[0]
	audit["supply_chain"] = v.Verdict
	audit["supply_chain_artifact"] = truncate(v.Artifact+" "+v.Digest, 512)
	if len(v.Failed) > 0 {
		audit["supply_chain_failed"] = truncate(strings.Join(v.Failed, "; "), 512)
	}
	if component == "" {
		return nil
	}
	att, err := json.Marshal(nonNil(v.Attestations))
	if err != nil {
		return err
	}
	failed, err := json.Marshal(nonNil(v.Failed))
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO artifact_verifications (install_id, component, job_id, artifact, digest, key_id, attestations, verdict, failed, verified_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (install_id, component) DO UPDATE SET job_id = excluded.job_id, artifact = excluded.artifact, digest = excluded.digest,
			key_id = excluded.key_id, attestations = excluded.attestations, verdict = excluded.verdict, failed = excluded.failed,
			verified_at = excluded.verified_at`),
		install, component, jobID, v.Artifact, v.Digest, v.KeyID, string(att), v.Verdict, string(failed), nanos(now))
	return err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// ArtifactVerifications returns the latest verification of each of an
// install's components, by component name.
func (s *Store) ArtifactVerifications(ctx context.Context, installID string) (map[string]ArtifactVerification, error) {
	var rows []struct {
		Component    string `db:"component"`
		JobID        string `db:"job_id"`
		Artifact     string `db:"artifact"`
		Digest       string `db:"digest"`
		KeyID        string `db:"key_id"`
		Attestations string `db:"attestations"`
		Verdict      string `db:"verdict"`
		Failed       string `db:"failed"`
		VerifiedAt   int64  `db:"verified_at"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT component, job_id, artifact, digest, key_id, attestations, verdict, failed, verified_at
		FROM artifact_verifications WHERE install_id = ?`), installID); err != nil {
		return nil, fmt.Errorf("install %s artifact verifications: %w", installID, err)
	}
	out := make(map[string]ArtifactVerification, len(rows))
	for _, r := range rows {
		v := ArtifactVerification{Artifact: r.Artifact, Digest: r.Digest, KeyID: r.KeyID, Verdict: r.Verdict, JobID: r.JobID, VerifiedAt: fromNanos(r.VerifiedAt)}
		if err := json.Unmarshal([]byte(r.Attestations), &v.Attestations); err != nil {
			return nil, fmt.Errorf("install %s component %s attestations: %w", installID, r.Component, err)
		}
		if err := json.Unmarshal([]byte(r.Failed), &v.Failed); err != nil {
			return nil, fmt.Errorf("install %s component %s failed rules: %w", installID, r.Component, err)
		}
		out[r.Component] = v
	}
	return out, nil
}

// ValidVerdict reports whether v is a verdict an agent may report.
func ValidVerdict(v string) bool {
	return slices.Contains(verdicts, v)
}
