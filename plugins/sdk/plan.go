package sdk

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	pluginv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/plugin/v1"
)

// Actions of a [PlannedChange].
const (
	ActionCreate  = "create"
	ActionUpdate  = "update"
	ActionDelete  = "delete"
	ActionReplace = "replace"
	// ActionImport is an object an import would adopt, as a policy's
	// input.changes of an import shows it (never a plan's change).
	ActionImport = "import"
)

// Masked is what a sensitive value is replaced with in a planned change;
// MaskedChanged replaces it in After when it differs from Before, so a
// change of a secret still shows as a change.
const (
	Masked        = "(sensitive)"
	MaskedChanged = "(sensitive, changed)"
)

// PlannedChange is one change a plan would make to one object, or one
// difference a drift check found (protocol 1.2). The agent writes each
// into the job's log.
type PlannedChange struct {
	// Address names the object: "aws_s3_bucket.logs", "Deployment/web".
	Address string
	// Action is ActionCreate, ActionUpdate, ActionDelete or ActionReplace.
	Action string
	// Before and After are the object's values before and after the
	// change, JSON-like (maps, slices, strings, float64, bool, nil); nil
	// for none (Before of a create, After of a delete).
	Before, After any
	// Sensitive lists paths in Before and After whose values never leave
	// the plugin: each is replaced with [Masked] (in After, with
	// [MaskedChanged] if it differs from Before) before the change is
	// sent. A path is keys joined by dots ("password", "spec.tls.key");
	// "" masks the whole value.
	Sensitive []string
	// Summary says the change in one line, for a human.
	Summary string
}

// String is the change as one line: "update aws_s3_bucket.logs: versioning
// on".
func (c PlannedChange) String() string {
	s := c.Action + " " + c.Address
	if c.Summary != "" {
		s += ": " + c.Summary
	}
	return s
}

// PlanDigest returns the digest of a plan ("sha256:<hex>") as the agent
// computes it, over the changes as they leave the plugin (Sensitive paths
// masked): the digest an operator's approval binds, and which the apply's
// JobContext.ApprovedPlanDigest carries. The agent computes it after
// redacting the customer's secrets, so a change whose values hold a
// secret's text has another digest there.
func PlanDigest(changes []PlannedChange) (string, error) {
	wire, err := plannedToProto(changes)
	if err != nil {
		return "", err
	}
	return PlanDigestOf(plannedFromProto(wire))
}

// PlanDigestOf is [PlanDigest] of changes as they arrived from a plugin
// (already masked): what the host computes.
func PlanDigestOf(changes []PlannedChange) (string, error) {
	in := make([]agentproto.PlanChange, len(changes))
	for i, c := range changes {
		in[i] = agentproto.PlanChange{Address: c.Address, Action: c.Action, Summary: c.Summary, Before: c.Before, After: c.After}
	}
	return agentproto.PlanDigest(in)
}

// plannedToProto checks and masks changes for the wire.
func plannedToProto(changes []PlannedChange) ([]*pluginv1.PlannedChange, error) {
	var out []*pluginv1.PlannedChange
	for i, c := range changes {
		if !slices.Contains([]string{ActionCreate, ActionUpdate, ActionDelete, ActionReplace}, c.Action) {
			return nil, fmt.Errorf("planned change %d (%s): action %q: want create, update, delete or replace", i, c.Address, c.Action)
		}
		if c.Address == "" {
			return nil, fmt.Errorf("planned change %d: address is empty", i)
		}
		p := &pluginv1.PlannedChange{Address: c.Address, Action: c.Action, Summary: validUTF8(c.Summary)}
		for _, v := range []struct {
			name string
			in   any
			out  **structpb.Value
		}{{"before", c.Before, &p.Before}, {"after", c.After, &p.After}} {
			if v.in == nil {
				continue
			}
			masked := v.in
			for _, path := range c.Sensitive {
				keys := strings.Split(path, ".")
				if path == "" {
					keys = nil
				}
				with := Masked
				if v.name == "after" && c.Before != nil {
					b, _ := lookup(c.Before, keys)
					a, _ := lookup(c.After, keys)
					if !reflect.DeepEqual(a, b) {
						with = MaskedChanged
					}
				}
				masked = mask(masked, keys, with)
			}
			val, err := structpb.NewValue(masked)
			if err != nil {
				return nil, fmt.Errorf("planned change %d (%s): %s: %w", i, c.Address, v.name, err)
			}
			*v.out = val
		}
		out = append(out, p)
	}
	return out, nil
}

// mask returns v with the value at path replaced by with, copying the
// maps on the way so the plugin's own values are left alone.
func mask(v any, path []string, with string) any {
	if len(path) == 0 {
		return with
	}
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	inner, ok := m[path[0]]
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		out[k] = e
	}
	out[path[0]] = mask(inner, path[1:], with)
	return out
}

// lookup returns the value at path in v.
func lookup(v any, path []string) (any, bool) {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func plannedFromProto(changes []*pluginv1.PlannedChange) []PlannedChange {
	var out []PlannedChange
	for _, c := range changes {
		p := PlannedChange{Address: c.GetAddress(), Action: c.GetAction(), Summary: c.GetSummary()}
		if c.Before != nil {
			p.Before = c.Before.AsInterface()
		}
		if c.After != nil {
			p.After = c.After.AsInterface()
		}
		out = append(out, p)
	}
	return out
}
