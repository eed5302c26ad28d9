package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// The output formats beyond text, wide and json, as kubectl names them:
// yaml, name, jsonpath=EXPR, jsonpath-file=FILE, go-template=TEMPLATE and
// go-template-file=FILE. Each renders the very object -o json prints (the
// same camelCase keys, the same lower-case enum values): a command decides
// only whether it prints structured output (jsonOutput) and hands the JSON
// to writeIndented, which renders it in the chosen format. So every command
// with -o json has every other format too, with no code of its own.

// outputFormat is a parsed -o value for structured output.
type outputFormat struct {
	name string // json, yaml, name, jsonpath or go-template
	jp   *jsonpath.JSONPath
	tmpl *template.Template
}

// outputHelp is the --output flag's description.
const outputHelp = "output format: text, wide (tables add ids), json, yaml, name, jsonpath=EXPR, jsonpath-file=FILE, go-template=TEMPLATE or go-template-file=FILE"

// parseOutput parses an -o value; text and wide give nil (no structured
// output).
func parseOutput(s string) (*outputFormat, error) {
	name, arg, hasArg := strings.Cut(s, "=")
	switch name {
	case "text", "wide":
		if !hasArg {
			return nil, nil
		}
	case "json", "yaml", "name":
		if !hasArg {
			return &outputFormat{name: name}, nil
		}
	case "jsonpath", "jsonpath-file", "go-template", "go-template-file":
		if strings.HasSuffix(name, "-file") {
			b, err := os.ReadFile(arg)
			if err != nil {
				return nil, usagef("--output %s: %v", name, err)
			}
			arg = string(b)
			name = strings.TrimSuffix(name, "-file")
		}
		if strings.TrimSpace(arg) == "" {
			return nil, usagef("--output %s needs an expression: -o %s=...", name, name)
		}
		f := &outputFormat{name: name}
		if name == "jsonpath" {
			// As kubectl: a bare path is one expression.
			if !strings.Contains(arg, "{") {
				arg = "{" + arg + "}"
			}
			f.jp = jsonpath.New("output").AllowMissingKeys(true)
			if err := f.jp.Parse(arg); err != nil {
				return nil, usagef("--output jsonpath: %v", err)
			}
			return f, nil
		}
		t, err := template.New("output").Parse(arg)
		if err != nil {
			return nil, usagef("--output go-template: %v", err)
		}
		f.tmpl = t
		return f, nil
	}
	return nil, usagef("--output must be text, wide, json, yaml, name, jsonpath=EXPR, jsonpath-file=FILE, go-template=TEMPLATE or go-template-file=FILE, not %q", s)
}

// formatWriter stands for standard output under a structured format other
// than json: whole documents (writeIndented's) are rendered in the format;
// anything else written to it passes through.
type formatWriter struct {
	w    io.Writer
	f    *outputFormat
	docs int
	// kind names the messages of the next document, for -o name.
	kind string
	md   protoreflect.MessageDescriptor
}

func (fw *formatWriter) Write(p []byte) (int, error) { return fw.w.Write(p) }

// document renders one JSON document (an object or an array).
func (fw *formatWriter) document(b []byte) error {
	defer func() { fw.kind, fw.md = "", nil }()
	fw.docs++
	switch fw.f.name {
	case "yaml":
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		if fw.docs > 1 {
			// Several documents (a --wait's updates, log lines): a YAML
			// stream.
			y = append([]byte("---\n"), y...)
		}
		_, err = fw.w.Write(y)
		return err
	case "name":
		return fw.names(b)
	}
	v, err := decodeJSON(b)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if fw.f.jp != nil {
		err = fw.f.jp.Execute(&out, v)
	} else {
		err = fw.f.tmpl.Execute(&out, v)
	}
	if err != nil {
		return &exitCodeError{code: exitError, msg: fmt.Sprintf("--output %s: %v", fw.f.name, err)}
	}
	_, err = fw.w.Write(out.Bytes())
	return err
}

// names prints kind/name (or kind/id) of the object b, or of each object
// of the array b, one a line, as kubectl's -o name does.
func (fw *formatWriter) names(b []byte) error {
	v, err := decodeJSON(b)
	if err != nil {
		return err
	}
	objs, ok := v.([]any)
	if !ok {
		objs = []any{v}
	}
	var out bytes.Buffer
	for _, o := range objs {
		kind, name := resourceName(fw.kind, fw.md, o)
		if name == "" {
			return &exitCodeError{code: exitError, msg: "--output name: this command prints no named resource; use -o json"}
		}
		if kind != "" {
			name = kind + "/" + name
		}
		out.WriteString(name + "\n")
	}
	_, err = fw.w.Write(out.Bytes())
	return err
}

// resourceName finds what -o name prints of the JSON object o, of message
// type md (nil for a plain value): its name, else its id; or, for a
// response that wraps a resource ({"install": {...}, "token": ...}), the
// wrapped resource's.
func resourceName(kind string, md protoreflect.MessageDescriptor, o any) (string, string) {
	m, ok := o.(map[string]any)
	if !ok {
		return "", ""
	}
	for _, key := range []string{"name", "id"} {
		if s, ok := m[key].(string); ok && s != "" {
			return kind, s
		}
	}
	if md == nil {
		return "", ""
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			continue
		}
		if k, n := resourceName(resourceKind(fd.Message()), fd.Message(), m[fd.JSONName()]); n != "" {
			return k, n
		}
	}
	return "", ""
}

// resourceKind is how -o name names a message type: BreakglassGrant →
// breakglass-grant.
func resourceKind(md protoreflect.MessageDescriptor) string {
	var b strings.Builder
	for i, r := range string(md.Name()) {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// decodeJSON decodes b keeping numbers as written (json.Number), so that a
// template prints 4, not 4e+00.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode json: %w", err)
	}
	return v, nil
}

// setKind tells a formatWriter w which message type the next document
// holds, for -o name.
func setKind(w io.Writer, md protoreflect.MessageDescriptor) {
	if fw, ok := w.(*formatWriter); ok {
		fw.kind, fw.md = resourceKind(md), md
	}
}

// writeDocument writes one compact JSON document: as a line under -o json
// (JSON Lines), in the format of a formatWriter otherwise.
func writeDocument(w io.Writer, m proto.Message, b []byte) error {
	if fw, ok := w.(*formatWriter); ok {
		setKind(w, m.ProtoReflect().Descriptor())
		return fw.document(b)
	}
	_, err := w.Write(append(b, '\n'))
	return err
}
