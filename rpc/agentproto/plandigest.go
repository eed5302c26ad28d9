package agentproto

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Plan digests. A plan an operator approves is bound to its digest: imsd
// stores it with the approval and signs it into the apply job
// (JobClaims.ApprovedPlanDigest), and the agent applies only if a fresh
// plan, made just before, has the same digest. The digest is over the
// planned changes as they reach imsd (masked by the plugin SDK, secrets
// redacted by the agent), so that what was approved is what was shown:
//
//	"sha256:" + lowercase hex of SHA-256 of
//	  "byoc plan digest v1\x00" + 4-byte big-endian count
//	  + each change's encoding, the encodings sorted bytewise
//	change = str(address) + str(action) + str(summary) + val(before) + val(after)
//
// str is a 4-byte big-endian length and the bytes; val is ConfigDigest's
// value encoding, an absent value being null ('n'). Sorting makes the
// digest independent of the order a plugin lists its changes in.

// planContext binds a plan digest to its purpose and version.
const planContext = "byoc plan digest v1\x00"

// PlanDigestPrefix starts every plan digest.
const PlanDigestPrefix = "sha256:"

// PlanChange is one planned change, as PlanDigest reads it. Before and
// After are JSON-like values (nil, bool, float64, string, []any,
// map[string]any); nil is none.
type PlanChange struct {
	Address, Action, Summary string
	Before, After            any
}

// PlanDigest returns the digest of a plan's changes, "sha256:<hex>".
func PlanDigest(changes []PlanChange) (string, error) {
	encs := make([][]byte, len(changes))
	for i, c := range changes {
		var b []byte
		for _, s := range []string{c.Address, c.Action, c.Summary} {
			b = appendString(b, s)
		}
		w := configWalker{encode: true, plan: true, b: b}
		for _, v := range []any{c.Before, c.After} {
			if err := w.value(v, 0); err != nil {
				return "", fmt.Errorf("planned change %d (%s): %w", i, c.Address, toConfigError(err))
			}
		}
		encs[i] = w.b
	}
	slices.SortFunc(encs, bytes.Compare)
	h := sha256.New()
	h.Write([]byte(planContext))
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(encs))))
	for _, e := range encs {
		h.Write(e)
	}
	return PlanDigestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// CheckPlanValue says whether v, a planned change's before or after value
// as PlanChange holds it, is within the limit PlanDigest enforces: only
// the depth (MaxConfigDepth below the value itself). It returns a
// *ConfigError naming the path from the value's top, or nil. imsd stores
// planned changes that carry no digest only within it too.
func CheckPlanValue(v any) error {
	w := configWalker{plan: true}
	if err := w.value(v, 0); err != nil {
		return toConfigError(err)
	}
	return nil
}

// PlanDigestHex returns the hex digits of a plan digest, the name of its
// artifact directory, and whether d is a well-formed digest.
func PlanDigestHex(d string) (string, bool) {
	h, ok := strings.CutPrefix(d, PlanDigestPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return "", false
	}
	for _, r := range h {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return "", false
		}
	}
	return h, true
}
