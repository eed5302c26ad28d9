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
	var job struct {
		Component     string `db:"component"`
		ComponentType string `db:"component_type"`
	}
	if err := tx.GetContext(ctx, &job, s.bind(`SELECT component, component_type FROM jobs WHERE id = ?`), jobID); err != nil {
		return fmt.Errorf("job %s component: %w", jobID, err)
	}
	component := job.Component
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
	if err != nil {
		return err
	}
	v.JobID, v.VerifiedAt = jobID, now
	return s.addVerificationHistory(ctx, tx, install, VerificationRecord{Component: component, ComponentType: job.ComponentType, ArtifactVerification: v})
}

// HistoryPerArtifact is how many verifications the history keeps of each
// component, and of each agent's plugin release of one type: the newest.
const HistoryPerArtifact = 100

// VerificationRecord is one verification in an install's history: of a
// component's artifact (AgentID empty), or of the plugin release agent
// AgentID pinned for ComponentType (Component empty; Version its
// version).
type VerificationRecord struct {
	Component, ComponentType, AgentID, Version string
	ArtifactVerification
}

// addVerificationHistory appends r to install's verification history
// and drops what it keeps no more (HistoryPerArtifact).
func (s *Store) addVerificationHistory(ctx context.Context, tx *txn, install string, r VerificationRecord) error {
	att, err := json.Marshal(nonNil(r.Attestations))
	if err != nil {
		return err
	}
	failed, err := json.Marshal(nonNil(r.Failed))
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO artifact_verification_history (install_id, component, component_type, agent_id, job_id,
		artifact, digest, version, key_id, attestations, verdict, failed, verified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		install, r.Component, r.ComponentType, r.AgentID, r.JobID, r.Artifact, r.Digest, r.Version, r.KeyID, string(att), r.Verdict, string(failed),
		nanos(r.VerifiedAt)); err != nil {
		return fmt.Errorf("record the verification history: %w", err)
	}
	_, err = tx.ExecContext(ctx, s.bind(`DELETE FROM artifact_verification_history
		WHERE install_id = ? AND component = ? AND component_type = ? AND agent_id = ? AND verified_at < (
			SELECT verified_at FROM artifact_verification_history
			WHERE install_id = ? AND component = ? AND component_type = ? AND agent_id = ?
			ORDER BY verified_at DESC LIMIT 1 OFFSET ?)`),
		install, r.Component, r.ComponentType, r.AgentID, install, r.Component, r.ComponentType, r.AgentID, HistoryPerArtifact-1)
	if err != nil {
		return fmt.Errorf("trim the verification history: %w", err)
	}
	return nil
}

// VerificationHistory returns the verifications on record of an
// install's artifacts and its agents' plugin releases, newest first, at
// most limit.
func (s *Store) VerificationHistory(ctx context.Context, installID string, limit int) ([]VerificationRecord, error) {
	var rows []struct {
		Component     string `db:"component"`
		ComponentType string `db:"component_type"`
		AgentID       string `db:"agent_id"`
		JobID         string `db:"job_id"`
		Artifact      string `db:"artifact"`
		Digest        string `db:"digest"`
		Version       string `db:"version"`
		KeyID         string `db:"key_id"`
		Attestations  string `db:"attestations"`
		Verdict       string `db:"verdict"`
		Failed        string `db:"failed"`
		VerifiedAt    int64  `db:"verified_at"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT component, component_type, agent_id, job_id, artifact, digest, version, key_id,
		attestations, verdict, failed, verified_at
		FROM artifact_verification_history WHERE install_id = ?
		ORDER BY verified_at DESC, component, component_type, agent_id LIMIT ?`), installID, limit); err != nil {
		return nil, fmt.Errorf("install %s verification history: %w", installID, err)
	}
	out := make([]VerificationRecord, 0, len(rows))
	for _, r := range rows {
		v := VerificationRecord{Component: r.Component, ComponentType: r.ComponentType, AgentID: r.AgentID, Version: r.Version,
			ArtifactVerification: ArtifactVerification{Artifact: r.Artifact, Digest: r.Digest, KeyID: r.KeyID, Verdict: r.Verdict,
				JobID: r.JobID, VerifiedAt: fromNanos(r.VerifiedAt)}}
		if err := json.Unmarshal([]byte(r.Attestations), &v.Attestations); err != nil {
			return nil, fmt.Errorf("install %s verification history attestations: %w", installID, err)
		}
		if err := json.Unmarshal([]byte(r.Failed), &v.Failed); err != nil {
			return nil, fmt.Errorf("install %s verification history failed rules: %w", installID, err)
		}
		out = append(out, v)
	}
	return out, nil
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
