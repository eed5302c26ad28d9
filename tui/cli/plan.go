package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// planMarks are the marks of planned changes, as Terraform prints them.
var planMarks = map[string]string{"create": "+", "update": "~", "delete": "-", "replace": "-/+"}

// printPlan writes a job's planned changes: a count per action, then one
// line per change and, under an update or replace, one line per
// top-level field that changes ("rules: 1 → 2"), under a create one per
// field.
func printPlan(w io.Writer, changes []*imsv1.PlannedChange) {
	if len(changes) == 0 {
		return
	}
	count := map[string]int{}
	for _, c := range changes {
		count[c.GetAction()]++
	}
	fmt.Fprintf(w, "\nPlan: %d to create, %d to update, %d to delete, %d to replace\n",
		count["create"], count["update"], count["delete"], count["replace"])
	for _, c := range changes {
		mark, ok := planMarks[c.GetAction()]
		if !ok {
			mark = "?"
		}
		line := fmt.Sprintf("  %s %s", mark, planText(c.GetAddress()))
		if c.GetSummary() != "" {
			line += ": " + planText(c.GetSummary())
		}
		fmt.Fprintln(w, line)
		before, after := c.GetBefore().GetStructValue().GetFields(), c.GetAfter().GetStructValue().GetFields()
		switch {
		case c.GetAction() == "create" && after != nil:
			for _, k := range sortedKeys(after) {
				fmt.Fprintf(w, "      %s = %s\n", planText(k), planValue(after[k]))
			}
		case before != nil && after != nil:
			keys := sortedKeys(after)
			for k := range before {
				if _, ok := after[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				b, a := before[k], after[k]
				if proto.Equal(b, a) {
					continue
				}
				fmt.Fprintf(w, "      %s: %s → %s\n", planText(k), planValue(b), planValue(a))
			}
		}
	}
}

func sortedKeys(m map[string]*structpb.Value) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// planValue is a value as compact JSON, "(none)" if absent, cut at 200
// bytes.
func planValue(v *structpb.Value) string {
	if v == nil {
		return "(none)"
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return "?"
	}
	s := planText(strings.Join(strings.Fields(string(b)), " "))
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}

// planText makes text from a plugin safe for a terminal: control
// characters become "?".
func planText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}
