package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/byoc-dev/byoc/schema/app/diag"
)

// A value is one TOML value with the line it is on, so every error can
// name the line of the key it is about.
type value struct {
	kind  valueKind
	line  int
	str   string
	num   float64
	isInt bool
	int   int64
	b     bool
	list  []*value
	table *table
}

type valueKind int

const (
	kString valueKind = iota + 1
	kNumber
	kBool
	kList
	kTable
	kDatetime
)

func (k valueKind) String() string {
	switch k {
	case kString:
		return "a string"
	case kNumber:
		return "a number"
	case kBool:
		return "a boolean"
	case kList:
		return "an array"
	case kTable:
		return "a table"
	case kDatetime:
		return "a date or time"
	}
	return "nothing"
}

// A table keeps its keys in the order they were written.
type table struct {
	keys   []string
	fields map[string]*entry
	// defined says the table was opened by a [header] (or is an inline
	// table or an element of an array of tables): TOML forbids defining
	// it twice.
	defined bool
	// inline tables are closed: nothing may be added to them later.
	inline bool
}

type entry struct {
	key     string
	keyLine int
	val     *value
	// arrayOfTables marks a [[x]] array, which later [[x]] headers extend.
	arrayOfTables bool
}

func newTable() *table { return &table{fields: map[string]*entry{}} }

func (t *table) get(k string) *entry { return t.fields[k] }

func (t *table) set(k string, line int, v *value) {
	t.keys = append(t.keys, k)
	t.fields[k] = &entry{key: k, keyLine: line, val: v}
}

// parseTOML reads one TOML document into a table. Syntax errors are
// returned as a Diagnostic naming the line.
func parseTOML(file string, data []byte) (*table, *diag.Diagnostic) {
	var p unstable.Parser
	p.Reset(data)
	root := newTable()
	root.defined = true
	cur := root
	line := func(r unstable.Range) int {
		if r.Length == 0 && r.Offset == 0 {
			return 0
		}
		return p.Shape(r).Start.Line
	}
	fail := func(ln int, format string, args ...any) *diag.Diagnostic {
		return &diag.Diagnostic{File: file, Line: ln, Message: fmt.Sprintf(format, args...)}
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.KeyValue:
			keys, lines := keyParts(e.Key(), line)
			v, d := convert(file, e.Value(), lines[len(lines)-1], line)
			if d != nil {
				return nil, d
			}
			if d := assign(file, cur, keys, lines, v); d != nil {
				return nil, d
			}
		case unstable.Table:
			keys, lines := keyParts(e.Key(), line)
			t, d := openTable(file, root, keys, lines)
			if d != nil {
				return nil, d
			}
			cur = t
		case unstable.ArrayTable:
			keys, lines := keyParts(e.Key(), line)
			parent, d := walkTables(file, root, keys[:len(keys)-1], lines)
			if d != nil {
				return nil, d
			}
			last, ln := keys[len(keys)-1], lines[len(lines)-1]
			t := newTable()
			t.defined = true
			elem := &value{kind: kTable, line: ln, table: t}
			switch ent := parent.get(last); {
			case ent == nil:
				parent.set(last, ln, &value{kind: kList, line: ln, list: []*value{elem}})
				parent.get(last).arrayOfTables = true
			case ent.arrayOfTables:
				ent.val.list = append(ent.val.list, elem)
			default:
				return nil, fail(ln, "[[%s]] redefines key %q, which line %d set already", strings.Join(keys, "."), last, ent.keyLine)
			}
			cur = t
		}
	}
	if err := p.Error(); err != nil {
		var perr *unstable.ParserError
		// An empty highlight still points where the parser stopped (the
		// end of the file, for a string left open there): go-toml's own
		// errors place it the same way. Only a nil one points nowhere.
		if errors.As(err, &perr) && perr.Highlight != nil {
			return nil, fail(p.Shape(p.Range(perr.Highlight)).Start.Line, "TOML syntax: %s", perr.Message)
		}
		return nil, fail(0, "TOML syntax: %v", err)
	}
	return root, nil
}

func keyParts(it unstable.Iterator, line func(unstable.Range) int) ([]string, []int) {
	var keys []string
	var lines []int
	for it.Next() {
		n := it.Node()
		keys = append(keys, string(n.Data))
		lines = append(lines, line(n.Raw))
	}
	return keys, lines
}

// walkTables descends from t through keys, creating implicit tables, and
// returns the innermost. An array of tables is entered at its last element.
func walkTables(file string, t *table, keys []string, lines []int) (*table, *diag.Diagnostic) {
	for i, k := range keys {
		ent := t.get(k)
		if ent == nil {
			nt := newTable()
			t.set(k, lines[i], &value{kind: kTable, line: lines[i], table: nt})
			t = nt
			continue
		}
		switch {
		case ent.val.kind == kTable && !ent.val.table.inline:
			t = ent.val.table
		case ent.arrayOfTables:
			t = ent.val.list[len(ent.val.list)-1].table
		default:
			return nil, &diag.Diagnostic{File: file, Line: lines[i], Key: strings.Join(keys[:i+1], "."),
				Message: fmt.Sprintf("is already %s (line %d) and cannot be extended as a table", ent.val.kind, ent.keyLine)}
		}
	}
	return t, nil
}

func openTable(file string, root *table, keys []string, lines []int) (*table, *diag.Diagnostic) {
	parent, d := walkTables(file, root, keys[:len(keys)-1], lines)
	if d != nil {
		return nil, d
	}
	last, ln := keys[len(keys)-1], lines[len(lines)-1]
	ent := parent.get(last)
	if ent == nil {
		t := newTable()
		t.defined = true
		parent.set(last, ln, &value{kind: kTable, line: ln, table: t})
		return t, nil
	}
	if ent.val.kind != kTable || ent.val.table.inline {
		return nil, &diag.Diagnostic{File: file, Line: ln, Key: strings.Join(keys, "."),
			Message: fmt.Sprintf("is already %s (line %d) and cannot be opened as a table", ent.val.kind, ent.keyLine)}
	}
	if ent.val.table.defined {
		return nil, &diag.Diagnostic{File: file, Line: ln, Key: strings.Join(keys, "."),
			Message: fmt.Sprintf("table [%s] is defined twice (first on line %d)", strings.Join(keys, "."), ent.keyLine)}
	}
	ent.val.table.defined = true
	return ent.val.table, nil
}

// assign sets a possibly dotted key in t.
func assign(file string, t *table, keys []string, lines []int, v *value) *diag.Diagnostic {
	parent := t
	for i, k := range keys[:len(keys)-1] {
		ent := parent.get(k)
		if ent == nil {
			nt := newTable()
			parent.set(k, lines[i], &value{kind: kTable, line: lines[i], table: nt})
			parent = nt
			continue
		}
		if ent.val.kind != kTable || ent.val.table.inline || ent.val.table.defined {
			return &diag.Diagnostic{File: file, Line: lines[i], Key: strings.Join(keys[:i+1], "."),
				Message: fmt.Sprintf("is already defined on line %d", ent.keyLine)}
		}
		parent = ent.val.table
	}
	last := keys[len(keys)-1]
	if ent := parent.get(last); ent != nil {
		return &diag.Diagnostic{File: file, Line: lines[len(lines)-1], Key: strings.Join(keys, "."),
			Message: fmt.Sprintf("is set twice (first on line %d)", ent.keyLine)}
	}
	parent.set(last, lines[len(lines)-1], v)
	return nil
}

// convert turns a parser node into a value; ln is the line of its key,
// used where the node has no position of its own.
func convert(file string, n *unstable.Node, ln int, line func(unstable.Range) int) (*value, *diag.Diagnostic) {
	if l := line(n.Raw); l > 0 {
		ln = l
	}
	bad := func(format string, args ...any) (*value, *diag.Diagnostic) {
		return nil, &diag.Diagnostic{File: file, Line: ln, Message: fmt.Sprintf(format, args...)}
	}
	switch n.Kind {
	case unstable.String:
		return &value{kind: kString, line: ln, str: string(n.Data)}, nil
	case unstable.Bool:
		return &value{kind: kBool, line: ln, b: string(n.Data) == "true"}, nil
	case unstable.Integer:
		i, err := parseInt(string(n.Data))
		if err != nil {
			return bad("%q is not a valid integer", n.Data)
		}
		return &value{kind: kNumber, line: ln, isInt: true, int: i, num: float64(i)}, nil
	case unstable.Float:
		s := strings.ReplaceAll(string(n.Data), "_", "")
		var f float64
		switch strings.TrimLeft(s, "+-") {
		case "inf":
			f = math.Inf(1)
			if strings.HasPrefix(s, "-") {
				f = math.Inf(-1)
			}
		case "nan":
			f = math.NaN()
		default:
			var err error
			if f, err = strconv.ParseFloat(s, 64); err != nil {
				return bad("%q is not a valid number", n.Data)
			}
		}
		return &value{kind: kNumber, line: ln, num: f}, nil
	case unstable.LocalDate, unstable.LocalTime, unstable.LocalDateTime, unstable.DateTime:
		return &value{kind: kDatetime, line: ln, str: string(n.Data)}, nil
	case unstable.Array:
		v := &value{kind: kList, line: ln, list: []*value{}}
		it := n.Children()
		for it.Next() {
			c, d := convert(file, it.Node(), ln, line)
			if d != nil {
				return nil, d
			}
			v.list = append(v.list, c)
		}
		return v, nil
	case unstable.InlineTable:
		t := newTable()
		it := n.Children()
		for it.Next() {
			kv := it.Node()
			keys, lines := keyParts(kv.Key(), line)
			c, d := convert(file, kv.Value(), lines[len(lines)-1], line)
			if d != nil {
				return nil, d
			}
			if d := assign(file, t, keys, lines, c); d != nil {
				return nil, d
			}
		}
		t.inline, t.defined = true, true
		return &value{kind: kTable, line: ln, table: t}, nil
	}
	return bad("unsupported TOML value %s", n.Kind)
}

func parseInt(s string) (int64, error) {
	s = strings.ReplaceAll(s, "_", "")
	base := 10
	sign := ""
	if strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
		sign, s = s[:1], s[1:]
	}
	switch {
	case strings.HasPrefix(s, "0x"):
		base, s = 16, s[2:]
	case strings.HasPrefix(s, "0o"):
		base, s = 8, s[2:]
	case strings.HasPrefix(s, "0b"):
		base, s = 2, s[2:]
	}
	return strconv.ParseInt(sign+s, base, 64)
}

// plain returns v as plain Go values (string, float64 or int64, bool,
// []any, map[string]any), the form component config is stored and sent in.
func (v *value) plain() any {
	switch v.kind {
	case kString, kDatetime:
		return v.str
	case kNumber:
		if v.isInt {
			return v.int
		}
		return v.num
	case kBool:
		return v.b
	case kList:
		out := make([]any, len(v.list))
		for i, e := range v.list {
			out[i] = e.plain()
		}
		return out
	case kTable:
		out := make(map[string]any, len(v.table.keys))
		for _, k := range v.table.keys {
			out[k] = v.table.fields[k].val.plain()
		}
		return out
	}
	return nil
}
