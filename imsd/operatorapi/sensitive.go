package operatorapi

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/schema/app/load"
)

// Masked is what every answer shows in place of a sensitive input's value.
// The values never leave imsd: only the agent that runs a job gets them,
// inside the job's assignment (agentapi), never through this service.
const Masked = "(sensitive)"

// sensitiveNames knows, per app, the inputs that any of its revisions
// marks sensitive. An input once sensitive stays masked even if a later
// revision drops the flag: an install may still be on the older revision,
// and a value shown once cannot be hidden again. Revisions are immutable
// and numbered from 1, so each is parsed once; a new revision (pushed
// through any replica) shows up in the revision list.
type sensitiveNames struct {
	mu   sync.Mutex
	apps map[string]*appSensitive
}

type appSensitive struct {
	upTo  int64 // revisions 1..upTo are parsed
	names map[string]bool
}

// sensitiveInputs returns the names of app appID's sensitive inputs. ok is
// false when they cannot be told (a read or parse failed): callers then
// mask every input, failing closed.
func (s *Service) sensitiveInputs(ctx context.Context, appID string) (names map[string]bool, ok bool) {
	revs, err := s.store.ListAppRevisions(ctx, appID)
	if err != nil {
		s.log.WarnContext(ctx, "cannot tell sensitive inputs; masking every input", "app", appID, "err", err)
		return nil, false
	}
	latest := int64(0)
	if len(revs) > 0 {
		latest = revs[0].Number
	}
	c := &s.sensitive
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apps == nil {
		c.apps = map[string]*appSensitive{}
	}
	a := c.apps[appID]
	if a == nil {
		a = &appSensitive{names: map[string]bool{}}
		c.apps[appID] = a
	}
	for n := a.upTo + 1; n <= latest; n++ {
		r, err := s.store.GetAppRevision(ctx, appID, n)
		if err != nil {
			s.log.WarnContext(ctx, "cannot tell sensitive inputs; masking every input", "app", appID, "revision", n, "err", err)
			return nil, false
		}
		app, err := load.Parse(r.Files, storedOptions())
		if err != nil {
			s.log.WarnContext(ctx, "cannot tell sensitive inputs; masking every input", "app", appID, "revision", n, "err", err)
			return nil, false
		}
		for _, name := range app.SensitiveInputs() {
			a.names[name] = true
		}
		a.upTo = n
	}
	// A copy: later revisions add to a.names while callers read theirs.
	return maps.Clone(a.names), true
}

// inputMasker masks installs' inputs for one answer, asking which inputs
// are sensitive once per app however many installs the answer holds.
type inputMasker struct {
	s    *Service
	apps map[string]maskedNames
}

type maskedNames struct {
	names map[string]bool
	ok    bool
}

func (s *Service) inputMasker() *inputMasker {
	return &inputMasker{s: s, apps: map[string]maskedNames{}}
}

// inputs returns an install's inputs with the sensitive ones masked
// (every one, if they cannot be told). It never changes in.
func (m *inputMasker) inputs(ctx context.Context, in store.Install) map[string]string {
	if len(in.Inputs) == 0 {
		return in.Inputs
	}
	a, seen := m.apps[in.AppID]
	if !seen {
		a.names, a.ok = m.s.sensitiveInputs(ctx, in.AppID)
		m.apps[in.AppID] = a
	}
	out := make(map[string]string, len(in.Inputs))
	for k, v := range in.Inputs {
		if !a.ok || a.names[k] {
			v = Masked
		}
		out[k] = v
	}
	return out
}

// maskedConfigJSON decodes a job's stored config, masking the values of
// sensitive inputs. A job's config lists those values under
// workflow.SensitiveKey (for the agent to redact what the job sends
// back), and they appear wherever the config used them (an action's env,
// a component's rendered config): every occurrence, in every string, is
// masked, and so is the list.
func maskedConfigJSON(raw []byte) (*structpb.Struct, error) {
	if !bytes.Contains(raw, []byte(`"`+workflow.SensitiveKey+`"`)) {
		cfg := &structpb.Struct{}
		return cfg, cfg.UnmarshalJSON(raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return structpb.NewStruct(maskConfig(m))
}

// maskedConfig is maskedConfigJSON for a config already decoded; it
// returns cfg itself when it lists no sensitive values.
func maskedConfig(cfg *structpb.Struct) *structpb.Struct {
	if cfg == nil || cfg.Fields[workflow.SensitiveKey] == nil {
		return cfg
	}
	out, err := structpb.NewStruct(maskConfig(cfg.AsMap()))
	if err != nil {
		// Every value came from a Struct, so this cannot happen; fail
		// closed all the same.
		return &structpb.Struct{}
	}
	return out
}

// maskConfig masks, in place, the values listed under
// workflow.SensitiveKey wherever they occur in m, and the list itself.
func maskConfig(m map[string]any) map[string]any {
	var vals []string
	switch l := m[workflow.SensitiveKey].(type) {
	case []any:
		for _, v := range l {
			if s, ok := v.(string); ok && s != "" {
				vals = append(vals, s)
			}
		}
	case string:
		if l != "" {
			vals = append(vals, l)
		}
	}
	// Longer values first, so that one value inside another is not left
	// half masked.
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(vals))
	for _, v := range vals {
		pairs = append(pairs, v, Masked)
	}
	mk := &masker{r: strings.NewReplacer(pairs...), whole: make(map[string]bool, len(vals))}
	for _, v := range vals {
		mk.whole[v] = true
	}
	_, had := m[workflow.SensitiveKey]
	delete(m, workflow.SensitiveKey)
	out := mk.value(m).(map[string]any)
	if had {
		masked := make([]any, 0, len(vals))
		for range vals {
			masked = append(masked, Masked)
		}
		out[workflow.SensitiveKey] = masked
	}
	return out
}

// masker masks sensitive values: inside strings, and numbers and bools
// whose text is one (a whole-value reference to a number input renders
// as a number).
type masker struct {
	r     *strings.Replacer
	whole map[string]bool
}

func (mk *masker) value(v any) any {
	switch x := v.(type) {
	case string:
		return mk.r.Replace(x)
	case float64:
		if mk.whole[strconv.FormatFloat(x, 'f', -1, 64)] {
			return Masked
		}
	case bool:
		if mk.whole[strconv.FormatBool(x)] {
			return Masked
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[mk.r.Replace(k)] = mk.value(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = mk.value(e)
		}
		return out
	}
	return v
}
