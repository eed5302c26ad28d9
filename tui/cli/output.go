package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/internal/reltime"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// jsonOptions renders messages for scripts: every field present (so that a
// missing field never needs special-casing), enum values by name (which
// marshalJSON then lowers).
var jsonOptions = protojson.MarshalOptions{EmitUnpopulated: true}

// marshalJSON renders one message as the CLI's JSON: protojson's, with
// every enum value as a lower-case name without its type's prefix
// ("succeeded", not "JOB_STATE_SUCCEEDED"), as the states that are plain
// strings in the API ("new", "active") already are.
func marshalJSON(m proto.Message) ([]byte, error) {
	b, err := jsonOptions.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	b, err = lowerEnums(m.ProtoReflect().Descriptor(), b)
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	return b, nil
}

// writeJSON prints one message as indented JSON. protojson deliberately
// varies its whitespace, so the result is re-indented with encoding/json
// to keep the output byte-stable.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := marshalJSON(m)
	if err != nil {
		return err
	}
	setKind(w, m.ProtoReflect().Descriptor())
	return writeIndented(w, b)
}

// enumName is how the CLI's JSON names an enum value: lower case, without
// the prefix its type's values share (JOB_STATE_TIMED_OUT → "timed_out").
func enumName(v protoreflect.EnumValueDescriptor) string {
	values := v.Parent().(protoreflect.EnumDescriptor).Values()
	prefix := string(values.Get(0).Name())
	for i := 1; i < values.Len(); i++ {
		name := string(values.Get(i).Name())
		for !strings.HasPrefix(name, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	// Cut at a word boundary: ROLE_ADMIN and ROLE_ALL share "ROLE_A".
	prefix = prefix[:strings.LastIndexByte(prefix, '_')+1]
	return strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix))
}

// lowerEnums rewrites the enum values in b, protojson's rendering of a
// message of type md, with enumName, keeping the order of every object's
// keys. It follows the descriptor, so a string that only looks like an
// enum name (in a log line, an input) is left alone.
func lowerEnums(md protoreflect.MessageDescriptor, b []byte) ([]byte, error) {
	if md.FullName().Parent() == "google.protobuf" {
		return b, nil // well-known types hold no enums of ours
	}
	return rewriteObject(b, func(key string, v json.RawMessage) (json.RawMessage, error) {
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			return v, nil
		}
		one := func(v json.RawMessage) (json.RawMessage, error) {
			return lowerValue(fd, v)
		}
		switch {
		case fd.IsList():
			return rewriteArray(v, one)
		case fd.IsMap():
			return rewriteObject(v, func(_ string, v json.RawMessage) (json.RawMessage, error) {
				return lowerValue(fd.MapValue(), v)
			})
		}
		return one(v)
	})
}

// lowerValue rewrites one value of field fd (one element of a list).
func lowerValue(fd protoreflect.FieldDescriptor, v json.RawMessage) (json.RawMessage, error) {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		var name string
		if json.Unmarshal(v, &name) != nil {
			return v, nil // a number: a value this build does not know
		}
		if ev := fd.Enum().Values().ByName(protoreflect.Name(name)); ev != nil {
			return json.Marshal(enumName(ev))
		}
		return v, nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if string(v) == "null" {
			return v, nil
		}
		return lowerEnums(fd.Message(), v)
	}
	return v, nil
}

// rewriteObject applies f to each value of the JSON object b, keeping the
// order of its keys.
func rewriteObject(b []byte, f func(key string, v json.RawMessage) (json.RawMessage, error)) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return b, nil // not an object (a well-known type's string form)
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if v, err = f(key, v); err != nil {
			return nil, err
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(v)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// rewriteArray applies f to each element of the JSON array b.
func rewriteArray(b []byte, f func(v json.RawMessage) (json.RawMessage, error)) ([]byte, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(b, &elems); err != nil {
		return nil, err
	}
	for i, e := range elems {
		var err error
		if elems[i], err = f(e); err != nil {
			return nil, err
		}
	}
	return json.Marshal(elems)
}

// writeJSONList prints messages as one JSON array (empty, not null, when
// there are none).
func writeJSONList[M proto.Message](w io.Writer, ms []M) error {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, m := range ms {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := marshalJSON(m)
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	var zero M
	setKind(w, zero.ProtoReflect().Descriptor())
	return writeIndented(w, buf.Bytes())
}

// writeIndented prints one JSON document: indented, or in the format of
// a formatWriter (-o yaml, name, jsonpath, go-template).
func writeIndented(w io.Writer, b []byte) error {
	if fw, ok := w.(*formatWriter); ok {
		return fw.document(b)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
		// A tab or newline in a cell would break the columns, and a
		// cell may hold what an agent or a job wrote (a recording's
		// title, a message): control sequences are shown, not obeyed.
		cells[i] = cellText(cells[i])
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// fields writes "Key:  value" lines with aligned values.
type fields struct{ tw *tabwriter.Writer }

func newFields(w io.Writer) *fields {
	return &fields{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
}

// add writes one line. The value is shown, not obeyed, like a table's
// cells: what it holds (a job's error and outputs, an agent's report) may
// come from the vendor's code or the customer's agent, and an escape
// sequence in it could rewrite the operator's screen or set the
// clipboard (OSC 52); a newline or tab could forge another line.
func (f *fields) add(key, value string) {
	if value == "" {
		value = "-"
	}
	fmt.Fprintf(f.tw, "%s:\t%s\n", key, cellText(value))
}

// cellText is s on one line of a table or fields, control characters
// shown, not obeyed.
func cellText(s string) string {
	return termtext.Clean(strings.NewReplacer("\t", " ", "\n", " ").Replace(s), " ")
}

func (f *fields) flush() error { return f.tw.Flush() }

// ago renders t relative to now, as "3s ago" or "in 5m"; "" for unset.
func ago(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return reltime.Since(now, ts.AsTime())
}

// when renders a timestamp as "3s ago (2025-01-02T15:04:05Z)".
func when(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return fmt.Sprintf("%s (%s)", ago(now, ts), ts.AsTime().Local().Format(time.RFC3339))
}

// keyValues renders a map as "k=v, k=v" in key order.
func keyValues(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeJSONValue prints a plain Go value as indented JSON, for output that
// is not an API message (such as local validation results).
func writeJSONValue(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return writeIndented(w, b)
}
