package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/schema/app/diag"
)

// fileTypes are the Go types of an app config's files; the fuzzer decodes
// every input into each.
var fileTypes = []reflect.Type{
	reflect.TypeFor[Metadata](), reflect.TypeFor[InputsFile](), reflect.TypeFor[SecretsFile](),
	reflect.TypeFor[Component](), reflect.TypeFor[Action](), reflect.TypeFor[Permissions](),
	reflect.TypeFor[PoliciesFile](), reflect.TypeFor[BreakGlass](), reflect.TypeFor[InstallFile](),
}

// FuzzDecode feeds the TOML reader and the decoder any bytes, as each file
// type, and checks that
//   - they do not panic;
//   - every problem names the file, a line of it and a message;
//   - reading does not depend on layout: the tree read from a file that
//     parses, written back in another layout (every key quoted on a line
//     of its own, tables inline), reads to the same tree and decodes to
//     the same value with the same problems.
//
// Writing back the decoded struct instead (with go-toml's encoder, which
// reads the same tags) does not round-trip, and should not: it writes
// every unset key as its zero value, and type = "" is not an unset type.
func FuzzDecode(f *testing.F) {
	// The example app and the golden tests' files are the seeds.
	seeds, _ := filepath.Glob("../load/example/*.toml")
	for _, dir := range []string{"components", "actions", "installs"} {
		more, _ := filepath.Glob("../load/example/" + dir + "/*.toml")
		seeds = append(seeds, more...)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	golden, _ := filepath.Glob("../load/testdata/*.txtar")
	for _, p := range golden {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, part := range strings.Split(string(b), "\n-- ")[1:] {
			name, body, _ := strings.Cut(part, " --\n")
			if strings.HasSuffix(name, ".toml") {
				f.Add([]byte(body))
			}
		}
	}
	if len(seeds) == 0 || len(golden) == 0 {
		f.Fatal("no seeds")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "components/fuzz.toml"
		lines := bytes.Count(data, []byte("\n")) + 1
		root, _ := parseTOML(file, data)
		var again *table
		if root != nil {
			var b strings.Builder
			writeTable(&b, root)
			var d *diag.Diagnostic
			if again, d = parseTOML(file, []byte(b.String())); d != nil {
				t.Fatalf("the tree read from\n%s\nwritten as\n%s\ndoes not read: %s", data, b.String(), d)
			}
			if !sameValue(&value{kind: kTable, table: root}, &value{kind: kTable, table: again}) {
				t.Fatalf("the tree read from\n%s\nwritten as\n%s\nreads differently", data, b.String())
			}
		}
		for _, typ := range fileTypes {
			ds := &diag.List{}
			v := reflect.New(typ)
			_, parsed := decodeFile(file, data, v.Interface(), ds)
			if parsed != (root != nil) {
				t.Fatalf("%s: decodeFile says parsed=%v, parseTOML disagrees", typ, parsed)
			}
			err := ds.Err()
			if err != nil {
				var de *diag.Error
				if !errors.As(err, &de) {
					t.Fatalf("%s: %T is not a *diag.Error", typ, err)
				}
				for _, d := range de.Diagnostics {
					if d.File != file || d.Line < 1 || d.Line > lines || d.Message == "" {
						t.Errorf("%s: %q does not name %s, a line from 1 to %d and a message", typ, d.String(), file, lines)
					}
				}
			} else if !parsed {
				t.Fatalf("%s: not decoded, and no problem reported", typ)
			}
			if again == nil {
				continue
			}
			ds2 := &diag.List{}
			w := reflect.New(typ)
			dec := &decoder{file: file, ds: ds2, lines: map[string]int{}}
			dec.decodeStruct("", &value{kind: kTable, line: 1, table: again}, w.Elem())
			if !equalValues(v.Elem(), w.Elem()) {
				t.Fatalf("%s: %#v, but %#v written in another layout", typ, v.Elem().Interface(), w.Elem().Interface())
			}
			if a, b := problems(ds), problems(ds2); a != b {
				t.Fatalf("%s: problems\n%s\nbut written in another layout\n%s", typ, a, b)
			}
		}
	})
}

// problems lists the problems in ds without their lines.
func problems(ds *diag.List) string {
	var de *diag.Error
	if !errors.As(ds.Err(), &de) {
		return ""
	}
	var out []string
	for _, d := range de.Diagnostics {
		d.Line = 0
		out = append(out, d.String())
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// writeTable writes t as TOML, every key quoted on a line of its own and
// every table inline.
func writeTable(b *strings.Builder, t *table) {
	for _, k := range t.keys {
		b.WriteString(tomlString(k))
		b.WriteString(" = ")
		writeValue(b, t.fields[k].val)
		b.WriteString("\n")
	}
}

func writeValue(b *strings.Builder, v *value) {
	switch v.kind {
	case kString:
		b.WriteString(tomlString(v.str))
	case kDatetime:
		b.WriteString(v.str)
	case kBool:
		b.WriteString(strconv.FormatBool(v.b))
	case kNumber:
		switch {
		case v.isInt:
			b.WriteString(strconv.FormatInt(v.int, 10))
		case math.IsNaN(v.num):
			b.WriteString("nan")
		case math.IsInf(v.num, 1):
			b.WriteString("inf")
		case math.IsInf(v.num, -1):
			b.WriteString("-inf")
		default:
			b.WriteString(strconv.FormatFloat(v.num, 'e', -1, 64))
		}
	case kList:
		b.WriteString("[")
		for i, e := range v.list {
			if i > 0 {
				b.WriteString(", ")
			}
			writeValue(b, e)
		}
		b.WriteString("]")
	case kTable:
		b.WriteString("{")
		for i, k := range v.table.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(tomlString(k))
			b.WriteString(" = ")
			writeValue(b, v.table.fields[k].val)
		}
		b.WriteString("}")
	}
}

// tomlString writes s as a TOML basic string: TOML escapes only \b \t \n
// \f \r \" \\ and \uXXXX, and allows no other control character raw.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// sameValue reports whether two trees hold the same keys in the same order
// and the same values (NaN equal to NaN), whatever their lines.
func sameValue(a, b *value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case kString, kDatetime:
		return a.str == b.str
	case kBool:
		return a.b == b.b
	case kNumber:
		return a.isInt == b.isInt && a.int == b.int && (a.num == b.num || math.IsNaN(a.num) && math.IsNaN(b.num)) &&
			math.Signbit(a.num) == math.Signbit(b.num)
	case kList:
		if len(a.list) != len(b.list) {
			return false
		}
		for i := range a.list {
			if !sameValue(a.list[i], b.list[i]) {
				return false
			}
		}
		return true
	case kTable:
		if !slices.Equal(a.table.keys, b.table.keys) {
			return false
		}
		for _, k := range a.table.keys {
			if !sameValue(a.table.fields[k].val, b.table.fields[k].val) {
				return false
			}
		}
		return true
	}
	return false
}

// equalValues is reflect.DeepEqual with NaN equal to NaN.
func equalValues(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		return x == y || math.IsNaN(x) && math.IsNaN(y)
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		if a.Kind() == reflect.Interface && a.Elem().Type() != b.Elem().Type() {
			return false
		}
		return equalValues(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !equalValues(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalValues(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !equalValues(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}
