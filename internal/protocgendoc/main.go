// Command protocgendoc is a protoc plugin that writes the API reference,
// docs/reference/api/, from the protos in rpc/ and their comments: a page
// per protobuf package (services and their methods, messages and their
// fields, enums and their values), split into parts of at most maxLines
// lines at a type's boundary, every message and enum type linked to where
// it is described, and an index, README.md. `make generate` runs it
// through buf (buf.gen.yaml, strategy all, so that types link across
// packages) and `make check-generate` fails when the committed pages
// differ, as for the generated Go. Its output is a function of the protos
// alone.
package main

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"
)

// maxLines is the most lines a part may have (the docs check allows 600).
const maxLines = 500

func main() {
	protogen.Options{}.Run(func(gen *protogen.Plugin) error {
		gen.SupportedFeatures = uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL)
		return generate(gen)
	})
}

// unit is one section of a package's page: a service, a message or an
// enum, with the anchors of the types it describes.
type unit struct {
	lines []string // may hold {{link:FULL.NAME}} placeholders
	types []protoreflect.FullName
}

type pkgDoc struct {
	name  protoreflect.FullName
	files []*protogen.File
	units []unit
	pages [][]unit
}

func generate(gen *protogen.Plugin) error {
	byPkg := map[protoreflect.FullName]*pkgDoc{}
	var order []protoreflect.FullName
	for _, f := range gen.Files {
		if !f.Generate {
			continue
		}
		name := f.Desc.Package()
		p := byPkg[name]
		if p == nil {
			p = &pkgDoc{name: name}
			byPkg[name] = p
			order = append(order, name)
		}
		p.files = append(p.files, f)
	}
	slices.Sort(order)
	// where[type] is the page and anchor a type is described at.
	where := map[protoreflect.FullName]string{}
	for _, name := range order {
		p := byPkg[name]
		slices.SortFunc(p.files, func(a, b *protogen.File) int { return strings.Compare(a.Desc.Path(), b.Desc.Path()) })
		for _, f := range p.files {
			for _, s := range f.Services {
				p.units = append(p.units, serviceUnit(s))
			}
		}
		for _, f := range p.files {
			for _, m := range f.Messages {
				p.units = append(p.units, messageUnits(m)...)
			}
			for _, e := range f.Enums {
				p.units = append(p.units, enumUnit(e))
			}
		}
		// Pack the units into parts of at most maxLines lines.
		header := 8
		var cur []unit
		n := header
		for _, u := range p.units {
			if len(cur) > 0 && n+1+len(u.lines) > maxLines {
				p.pages = append(p.pages, cur)
				cur, n = nil, header
			}
			cur = append(cur, u)
			n += 1 + len(u.lines) // a blank line before each
		}
		if len(cur) > 0 {
			p.pages = append(p.pages, cur)
		}
		for i, page := range p.pages {
			for _, u := range page {
				for _, t := range u.types {
					where[t] = pageName(p.name, i) + "#" + anchor(t)
				}
			}
		}
	}
	for _, name := range order {
		p := byPkg[name]
		for i, page := range p.pages {
			g := gen.NewGeneratedFile(pageName(p.name, i), "")
			var b strings.Builder
			b.WriteString(generatedBy)
			title := string(p.name)
			if len(p.pages) > 1 {
				title += fmt.Sprintf(" (part %d of %d)", i+1, len(p.pages))
			}
			fmt.Fprintf(&b, "# %s\n\n", title)
			var paths []string
			for _, f := range p.files {
				paths = append(paths, "`rpc/"+f.Desc.Path()+"`")
			}
			fmt.Fprintf(&b, "From %s. [All packages](README.md)", strings.Join(paths, ", "))
			for j := range p.pages {
				if j != i {
					fmt.Fprintf(&b, " · [part %d](%s)", j+1, pageName(p.name, j))
				}
			}
			b.WriteString(".\n")
			for _, u := range page {
				b.WriteString("\n")
				for _, l := range u.lines {
					b.WriteString(resolve(l, p.name, pageName(p.name, i), where))
					b.WriteString("\n")
				}
			}
			g.P(strings.TrimSuffix(b.String(), "\n"))
		}
	}
	idx := gen.NewGeneratedFile("README.md", "")
	var b strings.Builder
	b.WriteString(generatedBy)
	b.WriteString("# API reference\n\nThe protobuf APIs, from the protos in `rpc/` and their comments. The\noperator API (`byoc.ims.v1`) is Connect, the agent protocol\n(`byoc.agent.v1`) Connect streaming, the plugin protocol\n(`byoc.plugin.v1`) plain gRPC (go-plugin). How they are versioned:\n[ARCHITECTURE.md](../../../ARCHITECTURE.md#rpc).\n\n| package | services | parts |\n|---|---|---|\n")
	for _, name := range order {
		p := byPkg[name]
		var svcs []string
		for _, f := range p.files {
			for _, s := range f.Services {
				svcs = append(svcs, fmt.Sprintf("[%s](%s)", s.Desc.Name(), where[s.Desc.FullName()]))
			}
		}
		var parts []string
		for i := range p.pages {
			parts = append(parts, fmt.Sprintf("[%d](%s)", i+1, pageName(p.name, i)))
		}
		fmt.Fprintf(&b, "| [%s](%s) | %s | %s |\n", p.name, pageName(p.name, 0), strings.Join(svcs, ", "), strings.Join(parts, " "))
	}
	idx.P(strings.TrimSuffix(b.String(), "\n"))
	return nil
}

const generatedBy = "<!-- Generated from the protos in rpc/ by `make generate` (internal/protocgendoc); do not edit. -->\n\n"

func pageName(pkg protoreflect.FullName, i int) string {
	if i == 0 {
		return string(pkg) + ".md"
	}
	return fmt.Sprintf("%s-%d.md", pkg, i+1)
}

// anchor is the GitHub anchor of the heading a type gets: its name
// relative to the package, lowercased, dots removed.
func anchor(full protoreflect.FullName) string {
	return strings.ToLower(strings.ReplaceAll(relName(full), ".", ""))
}

// relName is a type's name within its package (Outer.Inner).
func relName(full protoreflect.FullName) string {
	s := string(full)
	// Strip the package: the leading lowercase segments.
	parts := strings.Split(s, ".")
	i := 0
	for i < len(parts)-1 && parts[i] != "" && parts[i][0] >= 'a' && parts[i][0] <= 'z' {
		i++
	}
	return strings.Join(parts[i:], ".")
}

// comment is an element's leading comment as Markdown lines.
func comment(c protogen.CommentSet) []string {
	text := strings.TrimSpace(string(c.Leading))
	if text == "" {
		return nil
	}
	var out []string
	for _, l := range strings.Split(text, "\n") {
		out = append(out, strings.TrimPrefix(l, " "))
	}
	return out
}

// oneLine is a comment for a table cell.
func oneLine(c protogen.CommentSet) string {
	s := strings.Join(strings.Fields(string(c.Leading)), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

func serviceUnit(s *protogen.Service) unit {
	u := unit{types: []protoreflect.FullName{s.Desc.FullName()}}
	u.lines = append(u.lines, fmt.Sprintf("## %s", relName(s.Desc.FullName())), "")
	if c := comment(s.Comments); c != nil {
		u.lines = append(u.lines, c...)
		u.lines = append(u.lines, "")
	}
	u.lines = append(u.lines, "| method | request | response | description |", "|---|---|---|---|")
	for _, m := range s.Methods {
		in := link(m.Input.Desc.FullName())
		out := link(m.Output.Desc.FullName())
		if m.Desc.IsStreamingClient() {
			in = "stream " + in
		}
		if m.Desc.IsStreamingServer() {
			out = "stream " + out
		}
		u.lines = append(u.lines, fmt.Sprintf("| `%s` | %s | %s | %s |", m.Desc.Name(), in, out, oneLine(m.Comments)))
	}
	return u
}

func link(t protoreflect.FullName) string { return "{{link:" + string(t) + "}}" }

func messageUnits(m *protogen.Message) []unit {
	if m.Desc.IsMapEntry() {
		return nil
	}
	u := unit{types: []protoreflect.FullName{m.Desc.FullName()}}
	u.lines = append(u.lines, fmt.Sprintf("## %s", relName(m.Desc.FullName())), "")
	if c := comment(m.Comments); c != nil {
		u.lines = append(u.lines, c...)
		u.lines = append(u.lines, "")
	}
	if len(m.Fields) == 0 {
		u.lines = append(u.lines, "No fields.")
	} else {
		u.lines = append(u.lines, "| field | number | type | description |", "|---|---|---|---|")
		for _, f := range m.Fields {
			desc := oneLine(f.Comments)
			if o := f.Oneof; o != nil && !o.Desc.IsSynthetic() {
				desc = strings.TrimSpace(fmt.Sprintf("(oneof `%s`) %s", o.Desc.Name(), desc))
			}
			u.lines = append(u.lines, fmt.Sprintf("| `%s` | %d | %s | %s |", f.Desc.Name(), f.Desc.Number(), fieldType(f), desc))
		}
	}
	out := []unit{u}
	for _, e := range m.Enums {
		out = append(out, enumUnit(e))
	}
	for _, n := range m.Messages {
		out = append(out, messageUnits(n)...)
	}
	return out
}

func fieldType(f *protogen.Field) string {
	d := f.Desc
	if d.IsMap() {
		return fmt.Sprintf("map<%s, %s>", kindName(d.MapKey()), kindName(d.MapValue()))
	}
	t := kindName(d)
	switch {
	case d.IsList():
		t = "repeated " + t
	case d.HasOptionalKeyword():
		t = "optional " + t
	}
	return t
}

func kindName(d protoreflect.FieldDescriptor) string {
	switch d.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return link(d.Message().FullName())
	case protoreflect.EnumKind:
		return link(d.Enum().FullName())
	}
	return "`" + d.Kind().String() + "`"
}

func enumUnit(e *protogen.Enum) unit {
	u := unit{types: []protoreflect.FullName{e.Desc.FullName()}}
	u.lines = append(u.lines, fmt.Sprintf("## %s", relName(e.Desc.FullName())), "")
	if c := comment(e.Comments); c != nil {
		u.lines = append(u.lines, c...)
		u.lines = append(u.lines, "")
	}
	u.lines = append(u.lines, "| value | number | description |", "|---|---|---|")
	for _, v := range e.Values {
		u.lines = append(u.lines, fmt.Sprintf("| `%s` | %d | %s |", v.Desc.Name(), v.Desc.Number(), oneLine(v.Comments)))
	}
	return u
}

// resolve replaces the link placeholders of a line: a type described in
// these pages becomes a link to it (its name relative to the page's
// package when it is the same package), any other (the well-known types)
// its full name in code.
func resolve(l string, pkg protoreflect.FullName, page string, where map[protoreflect.FullName]string) string {
	for {
		i := strings.Index(l, "{{link:")
		if i < 0 {
			return l
		}
		j := strings.Index(l[i:], "}}")
		full := protoreflect.FullName(l[i+len("{{link:") : i+j])
		name := string(full)
		if full.Parent() != "" && strings.HasPrefix(name, string(pkg)+".") {
			name = strings.TrimPrefix(name, string(pkg)+".")
		}
		repl := "`" + name + "`"
		if w, ok := where[full]; ok {
			target := w
			if strings.HasPrefix(w, page+"#") {
				target = w[len(page):]
			}
			repl = fmt.Sprintf("[`%s`](%s)", name, target)
		}
		l = l[:i] + repl + l[i+j+2:]
	}
}
