package terraform

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// Unknown stands for a value Terraform knows only after the apply.
const Unknown = "(known after apply)"

// changesOf turns Terraform's resource changes (or, for drift, its
// resource drift) into planned changes: no-ops and reads are left out,
// unknown values shown as Unknown, sensitive ones masked.
func changesOf(rcs []*tfjson.ResourceChange, drift bool) []sdk.PlannedChange {
	var out []sdk.PlannedChange
	for _, rc := range rcs {
		if rc == nil || rc.Change == nil {
			continue
		}
		action := actionOf(rc.Change.Actions)
		if action == "" {
			continue
		}
		c := rc.Change
		before := maskSensitive(c.Before, c.BeforeSensitive, nil, sdk.Masked)
		after := withUnknown(c.After, c.AfterUnknown)
		after = maskSensitive(after, c.AfterSensitive, c.Before, "")
		pc := sdk.PlannedChange{Address: rc.Address, Action: action, Before: before, After: after}
		if action == sdk.ActionDelete {
			pc.After = nil
		}
		if action == sdk.ActionCreate {
			pc.Before = nil
		}
		pc.Summary = summarize(rc, pc, drift)
		out = append(out, pc)
	}
	return out
}

func actionOf(a tfjson.Actions) string {
	switch {
	case a.Replace():
		return sdk.ActionReplace
	case a.Create():
		return sdk.ActionCreate
	case a.Update():
		return sdk.ActionUpdate
	case a.Delete():
		return sdk.ActionDelete
	}
	return "" // no-op, read
}

// withUnknown replaces the parts of v that after_unknown marks true.
func withUnknown(v, unknown any) any {
	switch u := unknown.(type) {
	case bool:
		if u {
			return Unknown
		}
		return v
	case map[string]any:
		m, _ := v.(map[string]any)
		out := make(map[string]any, len(m)+len(u))
		for k, e := range m {
			out[k] = e
		}
		for k, ue := range u {
			out[k] = withUnknown(out[k], ue)
		}
		return out
	case []any:
		l, _ := v.([]any)
		out := slices.Clone(l)
		for i, ue := range u {
			if i < len(out) {
				out[i] = withUnknown(out[i], ue)
			} else if b, ok := ue.(bool); ok && b {
				out = append(out, Unknown)
			}
		}
		return out
	}
	return v
}

// maskSensitive replaces the parts of v that sens (Terraform's
// before_sensitive/after_sensitive: true, or maps and lists of them)
// marks. with is the mask; "" means sdk.MaskedChanged where the value
// differs from the same part of before, else sdk.Masked.
func maskSensitive(v, sens, before any, with string) any {
	switch s := sens.(type) {
	case bool:
		if !s || v == nil {
			return v
		}
		if with != "" {
			return with
		}
		if before != nil && !reflect.DeepEqual(v, before) {
			return sdk.MaskedChanged
		}
		if before == nil {
			return sdk.MaskedChanged
		}
		return sdk.Masked
	case map[string]any:
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		bm, _ := before.(map[string]any)
		out := make(map[string]any, len(m))
		for k, e := range m {
			out[k] = e
		}
		for k, se := range s {
			if _, ok := out[k]; ok {
				out[k] = maskSensitive(out[k], se, bm[k], with)
			}
		}
		return out
	case []any:
		l, ok := v.([]any)
		if !ok {
			return v
		}
		bl, _ := before.([]any)
		out := slices.Clone(l)
		for i, se := range s {
			if i < len(out) {
				var b any
				if i < len(bl) {
					b = bl[i]
				}
				out[i] = maskSensitive(out[i], se, b, with)
			}
		}
		return out
	}
	return v
}

// summarize says a change in one line, without times or anything else
// that differs between two plans of the same state.
func summarize(rc *tfjson.ResourceChange, pc sdk.PlannedChange, drift bool) string {
	switch {
	case drift && pc.Action == sdk.ActionDelete:
		return "deleted outside byoc"
	case drift:
		return "changed outside byoc: " + orNone(changedKeys(pc.Before, pc.After))
	case pc.Action == sdk.ActionCreate:
		return "new " + rc.Type
	case pc.Action == sdk.ActionDelete:
		return "remove " + rc.Type
	case pc.Action == sdk.ActionReplace:
		var paths []string
		for _, p := range rc.Change.ReplacePaths {
			paths = append(paths, pathString(p))
		}
		if len(paths) == 0 {
			return "replace " + rc.Type
		}
		slices.Sort(paths)
		return "replace " + rc.Type + " (forced by " + strings.Join(paths, ", ") + ")"
	}
	return "change " + orNone(changedKeys(pc.Before, pc.After))
}

func pathString(p any) string {
	l, ok := p.([]any)
	if !ok {
		return fmt.Sprint(p)
	}
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = fmt.Sprint(e)
	}
	return strings.Join(parts, ".")
}

// changedKeys lists the top-level keys whose values differ.
func changedKeys(before, after any) []string {
	b, _ := before.(map[string]any)
	a, _ := after.(map[string]any)
	var keys []string
	for k, v := range a {
		if !reflect.DeepEqual(v, b[k]) {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// planSummary counts a plan's changes the way Terraform does, and names
// the outputs it changes.
func planSummary(changes []sdk.PlannedChange, p *tfjson.Plan) string {
	var add, change, destroy int
	for _, c := range changes {
		switch c.Action {
		case sdk.ActionCreate:
			add++
		case sdk.ActionUpdate:
			change++
		case sdk.ActionDelete:
			destroy++
		case sdk.ActionReplace:
			add++
			destroy++
		}
	}
	s := fmt.Sprintf("Plan: %d to add, %d to change, %d to destroy.", add, change, destroy)
	if len(changes) == 0 {
		s = "No changes."
	}
	var outs []string
	for name, oc := range p.OutputChanges {
		if oc != nil && actionOf(oc.Actions) != "" {
			outs = append(outs, name)
		}
	}
	if len(outs) > 0 {
		slices.Sort(outs)
		s += " Outputs changing: " + strings.Join(outs, ", ") + "."
	}
	return s
}

func driftSummary(changes []sdk.PlannedChange) string {
	if len(changes) == 0 {
		return "No drift: the real objects match the state."
	}
	return fmt.Sprintf("Drift: %d object(s) changed outside byoc.", len(changes))
}

// lineWriter splits what Terraform writes into lines for the job log.
type lineWriter struct {
	mu   sync.Mutex
	emit func(string)
	buf  []byte
	mute bool
}

// Mute drops what is written until Mute(false).
func (w *lineWriter) Mute(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mute = on
	w.buf = nil
}

func newLineWriter(emit func(string)) *lineWriter { return &lineWriter{emit: emit} }

// maxLine bounds a line held back waiting for its newline.
const maxLine = 64 << 10

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mute {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(strings.TrimRight(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLine {
		w.emit(string(w.buf))
		w.buf = nil
	}
	return len(p), nil
}

// Flush sends a last line that had no newline.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
		w.buf = nil
	}
}

// outputsChange reports whether a plan changes an output.
func outputsChange(p *tfjson.Plan) bool {
	for _, oc := range p.OutputChanges {
		if oc != nil && actionOf(oc.Actions) != "" {
			return true
		}
	}
	return false
}
