package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	tea "charm.land/bubbletea/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/byoc-dev/byoc/tui/termtext"
)

// selectable is a view whose row under the cursor is an object imsd
// returned: d describes it, y shows it as YAML (J as JSON), c copies its id.
type selectable interface {
	// Selected is the object under the cursor; obj is nil when there is none.
	Selected() selection
}

// selection is a row's object, its kind ("install", "job"), the name a
// person reads and the id c copies.
type selection struct {
	obj            proto.Message
	kind, name, id string
}

// objectFormat is how an objectView shows its object.
type objectFormat int

const (
	fmtDescribe objectFormat = iota
	fmtYAML
	fmtJSON
)

var formatNames = map[objectFormat]string{fmtDescribe: "describe", fmtYAML: "yaml", fmtJSON: "json"}

// objectView shows one object as imsd returned it: protojson (camelCase
// keys, as `byoc … -o json`), as YAML with the same keys, or described as
// one aligned `path: value` line per field. The text of each format is
// made once, when the view opens (the object does not change), and is
// cleaned of control characters; the list keys scroll it, d, y and J
// switch the format.
type objectView struct {
	*env
	selection
	format objectFormat
	text   map[objectFormat][]string
	err    error
	off    int
	w, h   int
}

func newObjectView(e *env, sel selection, f objectFormat) *objectView {
	v := &objectView{env: e, selection: sel, format: f, text: map[objectFormat][]string{}}
	v.text[fmtJSON], v.text[fmtYAML], v.text[fmtDescribe], v.err = objectTexts(sel.obj)
	return v
}

// objectTexts renders obj as indented JSON, YAML and describe lines.
func objectTexts(obj proto.Message) (js, ym, desc []string, err error) {
	raw, err := protojson.Marshal(obj)
	if err != nil {
		return nil, nil, nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return nil, nil, nil, err
	}
	y, err := yaml.JSONToYAML(raw)
	if err != nil {
		return nil, nil, nil, err
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil, nil, nil, err
	}
	var pairs [][2]string
	flatten("", tree, &pairs)
	kw := 0
	for _, p := range pairs {
		kw = max(kw, len(p[0]))
	}
	for _, p := range pairs {
		desc = append(desc, termtext.Clean(fmt.Sprintf("%-*s  %s", kw+1, p[0]+":", p[1]), " "))
	}
	return cleanLines(buf.String()), cleanLines(strings.TrimRight(string(y), "\n")), desc, nil
}

func cleanLines(s string) []string {
	out := strings.Split(s, "\n")
	for i, l := range out {
		out[i] = termtext.Clean(l, " ")
	}
	return out
}

// flatten lists the leaves of a JSON value as (path, value): objects'
// keys sorted and joined with dots, list items as [i].
func flatten(path string, v any, out *[][2]string) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) == 0 && path != "" {
			*out = append(*out, [2]string{path, "{}"})
		}
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flatten(p, v[k], out)
		}
	case []any:
		if len(v) == 0 {
			*out = append(*out, [2]string{path, "[]"})
		}
		for i, x := range v {
			flatten(fmt.Sprintf("%s[%d]", path, i), x, out)
		}
	case string:
		*out = append(*out, [2]string{path, strings.ReplaceAll(v, "\n", `\n`)})
	default:
		b, _ := json.Marshal(v)
		*out = append(*out, [2]string{path, string(b)})
	}
}

func (v *objectView) Init() tea.Cmd { return nil }
func (v *objectView) Title() string {
	return v.kind + " " + termtext.Clean(v.name, " ") + " (" + formatNames[v.format] + ")"
}
func (v *objectView) SetSize(w, h int) { v.w, v.h = w, h; v.clamp() }
func (v *objectView) Hints() []Action  { return []Action{ActDescribe, ActYAML, ActJSON} }

// page is the lines of text shown under the title.
func (v *objectView) page() int { return max(1, v.h-2) }

func (v *objectView) clamp() {
	v.off = max(0, min(v.off, len(v.text[v.format])-v.page()))
}

func (v *objectView) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	switch {
	case v.km.Is(k, ActUp):
		v.off--
	case v.km.Is(k, ActDown):
		v.off++
	case v.km.Is(k, ActPageUp):
		v.off -= max(1, v.page()-1)
	case v.km.Is(k, ActPageDown):
		v.off += max(1, v.page()-1)
	case v.km.Is(k, ActTop):
		v.off = 0
	case v.km.Is(k, ActBottom):
		v.off = len(v.text[v.format])
	case v.km.Is(k, ActDescribe):
		v.format, v.off = fmtDescribe, 0
	case v.km.Is(k, ActYAML):
		v.format, v.off = fmtYAML, 0
	case v.km.Is(k, ActJSON):
		v.format, v.off = fmtJSON, 0
	case v.km.Is(k, ActCopyID):
		return v.nav.copyID(v.kind, v.id)
	}
	v.clamp()
	return nil
}

func (v *objectView) View() string {
	head := strings.ToUpper(v.kind[:1]) + v.kind[1:] + " " + termtext.Clean(v.name, " ")
	if v.id != v.name {
		head += " (" + termtext.Clean(v.id, " ") + ")"
	}
	out := []string{v.st.title.Render(head) + v.st.muted.Render("  "+formatNames[v.format]+" (d describe, y yaml, J json)"), ""}
	if v.err != nil {
		return lines(append(out, v.st.bad.Render("cannot show it: "+v.err.Error())))
	}
	text := v.text[v.format]
	end := min(len(text), v.off+v.page())
	out = append(out, text[v.off:end]...)
	if end < len(text) && len(out) > 2 {
		out[len(out)-1] = v.st.muted.Render(fmt.Sprintf("  … %d more lines (down/pgdown)", len(text)-end+1))
	}
	return lines(out)
}
