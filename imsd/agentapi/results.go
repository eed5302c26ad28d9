package agentapi

// Checking a job result's outcome, plan digest, planned changes and policy
// findings.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

var outcomes = map[agentv1.Outcome]store.JobState{
	agentv1.Outcome_OUTCOME_SUCCEEDED: store.JobSucceeded,
	agentv1.Outcome_OUTCOME_FAILED:    store.JobFailed,
	agentv1.Outcome_OUTCOME_CANCELLED: store.JobCancelled,
	agentv1.Outcome_OUTCOME_TIMED_OUT: store.JobTimedOut,
	agentv1.Outcome_OUTCOME_REFUSED:   store.JobRefused,
}

// checkPlanDigest refuses a result whose plan digest is malformed or,
// when it carries the plan's changes, is not theirs: an approval binds
// the digest, so it must be the digest of what the operator is shown.
func checkPlanDigest(r *agentv1.JobResult) error {
	if r.PlanDigest == "" {
		return nil
	}
	if _, ok := agentproto.PlanDigestHex(r.PlanDigest); !ok {
		return fmt.Errorf("result.plan_digest: %q is not sha256: and 64 lowercase hex digits", r.PlanDigest)
	}
	if len(r.PlannedChanges) == 0 {
		return nil // an approved apply reports the digest of its fresh plan only
	}
	in := make([]agentproto.PlanChange, len(r.PlannedChanges))
	for i, c := range r.PlannedChanges {
		in[i] = agentproto.PlanChange{Address: c.Address, Action: c.Action, Summary: c.Summary}
		if c.Before != nil {
			in[i].Before = c.Before.AsInterface()
		}
		if c.After != nil {
			in[i].After = c.After.AsInterface()
		}
	}
	d, err := agentproto.PlanDigest(in)
	if err != nil {
		return fmt.Errorf("result.planned_changes: %w", err)
	}
	if d != r.PlanDigest {
		return fmt.Errorf("result.plan_digest: %s is not the digest of the result's planned_changes (%s)", r.PlanDigest, d)
	}
	return nil
}

// MaxPlannedChanges bounds the planned changes stored with a job; beyond
// it, one more change says how many were left out.
const MaxPlannedChanges = 1000

// plannedChanges converts a result's planned changes for the store. A
// before or after value nested past the limit a plan digest enforces
// (agentproto.CheckPlanValue) is left out, and the change's summary says
// which and why, as a job's get does for such a value already stored: a
// result without a digest is not checked by checkPlanDigest, and a value
// that deep would otherwise be stored and shown to no one.
func plannedChanges(in []*agentv1.PlannedChange) ([]store.PlannedChange, error) {
	var out []store.PlannedChange
	for i, c := range in {
		if i == MaxPlannedChanges {
			out = append(out, store.PlannedChange{Address: "(more)", Action: "update",
				Summary: fmt.Sprintf("%d more changes were not stored", len(in)-i)})
			break
		}
		p := store.PlannedChange{Address: c.Address, Action: c.Action, Summary: c.Summary}
		for _, v := range []struct {
			name string
			in   *structpb.Value
			out  *json.RawMessage
		}{{"before", c.Before, &p.Before}, {"after", c.After, &p.After}} {
			if v.in == nil {
				continue
			}
			if err := agentproto.CheckPlanValue(v.in.AsInterface()); err != nil {
				where := err.Error()
				if ce, ok := errors.AsType[*agentproto.ConfigError](err); ok {
					where = v.name + ce.Path + ": " + ce.Problem
				}
				note := "imsd did not store the " + v.name + " value of this change: " + where
				p.Summary = strings.TrimPrefix(p.Summary+"; "+note, "; ")
				continue
			}
			b, err := v.in.MarshalJSON()
			if err != nil {
				return nil, fmt.Errorf("result.planned_changes[%d].%s: %w", i, v.name, err)
			}
			*v.out = b
		}
		out = append(out, p)
	}
	return out, nil
}

// MaxPolicyFindings bounds the policy findings stored with a job; beyond
// it, one more warning says how many were left out.
const MaxPolicyFindings = 1000

// policyFindings checks and converts a result's policy findings for the
// store.
func policyFindings(in []*agentv1.PolicyFinding) ([]store.PolicyFinding, error) {
	var out []store.PolicyFinding
	for i, f := range in {
		if i == MaxPolicyFindings {
			out = append(out, store.PolicyFinding{Policy: "(more)", Source: "customer", Level: "warn",
				Message: fmt.Sprintf("%d more policy findings were not stored", len(in)-i)})
			break
		}
		switch {
		case f.Level != "deny" && f.Level != "warn":
			return nil, fmt.Errorf("result.policy_findings[%d].level: must be deny or warn, got %q", i, f.Level)
		case f.Source != "vendor" && f.Source != "customer":
			return nil, fmt.Errorf("result.policy_findings[%d].source: must be vendor or customer, got %q", i, f.Source)
		}
		out = append(out, store.PolicyFinding{Policy: CutUTF8(f.Policy, 1024), Source: f.Source, Level: f.Level,
			Message: CutUTF8(f.Message, MaxLogLineBytes)})
	}
	return out, nil
}

// Bounds on a result's artifact verifications.
const (
	maxVerifications      = 16
	maxVerificationItems  = 32
	maxVerificationString = 2048
)

// verifications checks and converts a result's artifact verifications
// (what the customer's supply-chain policy verified) for the store.
func verifications(in []*agentv1.ArtifactVerification) ([]store.ArtifactVerification, error) {
	if len(in) > maxVerifications {
		return nil, fmt.Errorf("result.verifications: %d, at most %d", len(in), maxVerifications)
	}
	cut := func(s string) string { return CutUTF8(s, maxVerificationString) }
	var out []store.ArtifactVerification
	for i, v := range in {
		if !store.ValidVerdict(v.Verdict) {
			return nil, fmt.Errorf("result.verifications[%d].verdict: must be verified, warned or refused, got %q", i, v.Verdict)
		}
		if len(v.Attestations) > maxVerificationItems || len(v.Failed) > maxVerificationItems {
			return nil, fmt.Errorf("result.verifications[%d]: at most %d attestations and %d failed rules", i, maxVerificationItems, maxVerificationItems)
		}
		sv := store.ArtifactVerification{Artifact: cut(v.Artifact), Digest: cut(v.Digest), KeyID: cut(v.KeyId), Verdict: v.Verdict}
		for _, a := range v.Attestations {
			sv.Attestations = append(sv.Attestations, cut(a))
		}
		for _, f := range v.Failed {
			sv.Failed = append(sv.Failed, cut(f))
		}
		out = append(out, sv)
	}
	return out, nil
}

// CutUTF8 is s cut to at most n bytes without splitting a character:
// what an agent sends is stored as text, and PostgreSQL refuses a byte
// sequence that is not UTF-8 (a result cut mid-character would never be
// stored, and the agent would send it again and again).
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD")
}
