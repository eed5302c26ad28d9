package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// --sort-by orders a list command's rows, in every output format, by a
// field of the object -o json prints for each row, named by its JSON path
// as kubectl's --sort-by is (.createTime, .agent.lastSeenTime, or
// {.name}). Ascending; rows that tie keep the server's order.

// sortableCommands are the list commands that take --sort-by, with the
// message type of their rows (for completing the flag): each calls
// sortRows on the rows it prints.
var sortableCommands = map[string]protoreflect.MessageDescriptor{
	"byoc app list":          (&imsv1.App{}).ProtoReflect().Descriptor(),
	"byoc app revisions":     (&imsv1.AppRevision{}).ProtoReflect().Descriptor(),
	"byoc install list":      (&imsv1.Install{}).ProtoReflect().Descriptor(),
	"byoc install images":    (&imsv1.InstallImage{}).ProtoReflect().Descriptor(),
	"byoc install artifacts": (&imsv1.InstallArtifact{}).ProtoReflect().Descriptor(),
	"byoc job list":          (&imsv1.Job{}).ProtoReflect().Descriptor(),
	"byoc workflow list":     (&imsv1.Workflow{}).ProtoReflect().Descriptor(),
	"byoc action runs":       (&imsv1.ActionRun{}).ProtoReflect().Descriptor(),
	"byoc breakglass list":   (&imsv1.BreakGlassGrant{}).ProtoReflect().Descriptor(),
	"byoc build list":        (&imsv1.Build{}).ProtoReflect().Descriptor(),
	"byoc plugin list":       (&imsv1.PluginType{}).ProtoReflect().Descriptor(),
	"byoc release list":      (&imsv1.Release{}).ProtoReflect().Descriptor(),
	"byoc token list":        (&imsv1.ApiToken{}).ProtoReflect().Descriptor(),
}

// addSortFlags gives each of sortableCommands under cmd its --sort-by
// flag, completing the field paths.
func (a *app) addSortFlags(cmd *cobra.Command) {
	if _, ok := sortableCommands[cmd.CommandPath()]; ok {
		cmd.Flags().StringVar(&a.sortBy, "sort-by", "", "sort the rows by this field of their -o json object, ascending (e.g. .name, .createTime)")
	}
	for _, sub := range cmd.Commands() {
		a.addSortFlags(sub)
	}
}

// sortRows sorts rows in place by --sort-by, if given. A path that names
// no sortable field of M is a usage error that lists the ones there are.
func sortRows[M proto.Message](a *app, rows []M) error {
	if a.sortBy == "" {
		return nil
	}
	var zero M
	md := zero.ProtoReflect().Descriptor()
	path, err := sortPath(md, a.sortBy)
	if err != nil {
		return err
	}
	fd := path[len(path)-1]
	keys := make([]any, len(rows))
	for i, r := range rows {
		b, err := marshalJSON(r)
		if err != nil {
			return err
		}
		v, err := decodeJSON(b)
		if err != nil {
			return err
		}
		for _, f := range path {
			m, _ := v.(map[string]any)
			v = m[f.JSONName()]
		}
		keys[i] = sortKey(fd, v)
	}
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(i, j int) int { return compareKeys(keys[i], keys[j]) })
	sorted := make([]M, len(rows))
	for i, k := range idx {
		sorted[i] = rows[k]
	}
	copy(rows, sorted)
	return nil
}

// sortPath resolves a --sort-by path against md: the fields it walks, the
// last one a sortable value.
func sortPath(md protoreflect.MessageDescriptor, expr string) ([]protoreflect.FieldDescriptor, error) {
	p := strings.TrimSpace(expr)
	if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
		p = p[1 : len(p)-1]
	}
	p = strings.TrimPrefix(p, ".")
	var path []protoreflect.FieldDescriptor
	cur := md
	for _, name := range strings.Split(p, ".") {
		var fd protoreflect.FieldDescriptor
		if cur != nil {
			fd = cur.Fields().ByJSONName(name)
		}
		if fd == nil || fd.IsList() || fd.IsMap() {
			return nil, usagef("--sort-by %q: a %s has no such field; sort by one of %s", expr, resourceKind(md), strings.Join(sortFields(md, "", 0), ", "))
		}
		path = append(path, fd)
		cur = nil
		if fd.Kind() == protoreflect.MessageKind && !leafMessage(fd.Message()) {
			cur = fd.Message()
		}
	}
	if cur != nil {
		return nil, usagef("--sort-by %q names an object; sort by one of its fields: %s", expr, strings.Join(sortFields(cur, "."+p, 0), ", "))
	}
	return path, nil
}

// leafMessage reports whether messages of md print as one value
// (a timestamp, a duration) rather than an object.
func leafMessage(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Timestamp", "google.protobuf.Duration":
		return true
	}
	return false
}

// sortFields lists the sortable paths of md under prefix, two levels deep.
func sortFields(md protoreflect.MessageDescriptor, prefix string, depth int) []string {
	var out []string
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsList() || fd.IsMap() {
			continue
		}
		path := prefix + "." + fd.JSONName()
		if fd.Kind() == protoreflect.MessageKind && !leafMessage(fd.Message()) {
			if depth < 1 && fd.Message().FullName().Parent() != "google.protobuf" {
				out = append(out, sortFields(fd.Message(), path, depth+1)...)
			}
			continue
		}
		out = append(out, path)
	}
	return out
}

// sortKey is the comparable form of value v of field fd: a float64 for
// numbers (protojson writes 64-bit ones as strings), a time for
// timestamps, a bool, a string, or nil for a missing value.
func sortKey(fd protoreflect.FieldDescriptor, v any) any {
	switch v := v.(type) {
	case nil:
		return nil
	case json.Number:
		f, _ := v.Float64()
		return f
	case bool:
		return v
	case string:
		switch fd.Kind() {
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
			protoreflect.Uint64Kind, protoreflect.Fixed64Kind, protoreflect.DoubleKind, protoreflect.FloatKind:
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		case protoreflect.MessageKind:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return t
			}
		}
		return v
	}
	return fmt.Sprint(v)
}

// compareKeys orders sort keys: missing first, then by value; keys of
// different types by their text.
func compareKeys(x, y any) int {
	switch {
	case x == nil || y == nil:
		return cmp.Compare(boolInt(x != nil), boolInt(y != nil))
	}
	switch xv := x.(type) {
	case float64:
		if yv, ok := y.(float64); ok {
			return cmp.Compare(xv, yv)
		}
	case time.Time:
		if yv, ok := y.(time.Time); ok {
			return xv.Compare(yv)
		}
	case bool:
		if yv, ok := y.(bool); ok {
			return cmp.Compare(boolInt(xv), boolInt(yv))
		}
	case string:
		if yv, ok := y.(string); ok {
			return strings.Compare(xv, yv)
		}
	}
	return strings.Compare(fmt.Sprint(x), fmt.Sprint(y))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
