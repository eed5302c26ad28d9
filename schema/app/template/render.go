package template

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/template/parse"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	"github.com/byoc-dev/byoc/schema/app/diag"
)

// Resolver returns the value of one reference. Render calls it for every
// {{ }} in a string.
type Resolver func(Ref) (any, error)

// RenderString replaces the references in s with what resolve returns,
// written into the text: a template inside a string renders to a string.
// Only when keepType is set does a string that is exactly one reference
// ("{{ .inputs.replicas }}") take the value itself, so that a number input
// stays a number (where the config's schema wants a number there, see
// RenderValue). A string without {{ is returned as it is.
func RenderString(s string, resolve Resolver, keepType bool) (any, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	segs, err := segmentsOf(s)
	if err != nil {
		return nil, err
	}
	if len(segs) == 1 && segs[0].ref != nil {
		v, err := resolve(*segs[0].ref)
		if err != nil || keepType {
			return v, err
		}
		return Text(v), nil
	}
	var b strings.Builder
	for _, sg := range segs {
		if sg.ref == nil {
			b.WriteString(sg.text)
			continue
		}
		v, err := resolve(*sg.ref)
		if err != nil {
			return nil, err
		}
		b.WriteString(Text(v))
	}
	return b.String(), nil
}

// A segment of a config string is plain text or one reference.
type segment struct {
	text string
	ref  *Ref
}

// segmentCache keeps the parsed segments of config strings: a fleet renders
// the same strings for every install.
var segmentCache struct {
	sync.Mutex
	m map[string][]segment
}

// segmentsOf parses s into text and references.
func segmentsOf(s string) ([]segment, error) {
	segmentCache.Lock()
	segs, ok := segmentCache.m[s]
	segmentCache.Unlock()
	if ok {
		return segs, nil
	}
	trees, err := parse.Parse("config", s, "{{", "}}")
	if err != nil {
		return nil, fmt.Errorf("reference syntax: %v", err)
	}
	for _, n := range trees["config"].Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			segs = append(segs, segment{text: string(n.Text)})
		case *parse.ActionNode:
			f, ok := plainField(n)
			if !ok {
				return nil, fmt.Errorf("{{%s}} is not a plain reference", n.Pipe)
			}
			r, rerr := refOf(f.Ident)
			if rerr != nil {
				return nil, fmt.Errorf("%s", rerr.Message)
			}
			segs = append(segs, segment{ref: &r})
		default:
			return nil, fmt.Errorf("%q is not allowed in config", n.String())
		}
	}
	segmentCache.Lock()
	if segmentCache.m == nil || len(segmentCache.m) > 100_000 {
		segmentCache.m = map[string][]segment{}
	}
	segmentCache.m[s] = segs
	segmentCache.Unlock()
	return segs, nil
}

func plainField(n *parse.ActionNode) (*parse.FieldNode, bool) {
	if len(n.Pipe.Decl) > 0 || len(n.Pipe.Cmds) != 1 || len(n.Pipe.Cmds[0].Args) != 1 {
		return nil, false
	}
	f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode)
	return f, ok
}

// Text is how a resolved value is written into text: strings as they
// are, numbers without exponent, nil as nothing.
func Text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// RenderValue renders every string inside a config value (maps and lists
// are walked) and returns a new value; v is not changed. Every template
// renders to a string, except a whole-value reference at a location
// (keys and list indexes below v) for which keepType reports true: the
// caller says so where the config's schema wants a number or a bool, and
// keepType may be nil. An error names the key path of the string that
// failed.
func RenderValue(path string, v any, resolve Resolver, keepType func(loc []string) bool) (any, error) {
	return renderValue(path, nil, v, resolve, keepType)
}

func renderValue(path string, loc []string, v any, resolve Resolver, keepType func(loc []string) bool) (any, error) {
	switch v := v.(type) {
	case string:
		out, err := RenderString(v, resolve, keepType != nil && strings.Contains(v, "{{") && keepType(loc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmpPath(path), err)
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = renderValue(fmt.Sprintf("%s[%d]", path, i), append(loc[:len(loc):len(loc)], strconv.Itoa(i)), e, resolve, keepType); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			r, err := renderValue(diag.Join(path, k), append(loc[:len(loc):len(loc)], k), e, resolve, keepType)
			if err != nil {
				// Report the first failing key in key order, whatever
				// order the map was walked in.
				for _, k := range slices.Sorted(maps.Keys(v)) {
					if _, err := renderValue(diag.Join(path, k), append(loc[:len(loc):len(loc)], k), v[k], resolve, keepType); err != nil {
						return nil, err
					}
				}
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	}
	return v, nil
}

func cmpPath(p string) string {
	if p == "" {
		return "value"
	}
	return p
}

// SecretRef is how a {{ .secrets.NAME }} reference stays in a rendered
// config, for the agent to fill in (agentproto.SecretRef).
func SecretRef(name string) string { return agentproto.SecretRef(name) }

// ReplaceSecrets replaces every {{ .secrets.NAME }} in s with lookup(NAME),
// as the agent does (agentproto.ReplaceSecrets, where the syntax lives).
func ReplaceSecrets(s string, lookup func(string) (string, bool)) (string, error) {
	return agentproto.ReplaceSecrets(s, lookup)
}

// Merge returns base with over merged onto it: tables merge key by key,
// any other value replaces. Neither argument is changed.
func Merge(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range over {
		bm, ok1 := out[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = Merge(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}
