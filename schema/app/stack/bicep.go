package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The Bicep source of an Azure stack is not written by hand: Bicep
// translates the ARM template Azure generates (decoded from its JSON),
// so the two cannot drift. Every template expression is parsed and
// printed in Bicep's syntax: parameters('X') is the parameter X,
// if/equals/not/and/or are ?:, ==, !, &&, ||, createObject and
// createArray are object and array literals, resourceId and reference
// of a resource the template declares are its symbol's id and
// properties, dependsOn and an extension resource's scope are symbols.

// Bicep returns the Bicep source of the install's Azure stack: the same
// parameters, variables, resources (types and API versions) and outputs
// as Azure's ARM template.
func Bicep(o Options) ([]byte, error) {
	tmpl, err := Azure(o)
	if err != nil {
		return nil, err
	}
	return ARMToBicep(tmpl)
}

// armNode is a parsed ARM template language expression.
type armNode struct {
	kind string // "str", "int", "call", "prop", "index"
	str  string // the literal, the function's or the property's name
	args []*armNode
}

// parseARMExpr parses an expression (without its brackets).
func parseARMExpr(s string) (*armNode, error) {
	p := &armParser{s: s}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("expression %q: unexpected %q at offset %d", s, p.s[p.i:], p.i)
	}
	return n, nil
}

type armParser struct {
	s string
	i int
}

func (p *armParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *armParser) expr() (*armNode, error) {
	p.space()
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("expression %q ends early", p.s)
	}
	var n *armNode
	c := p.s[p.i]
	switch {
	case c == '\'':
		var b strings.Builder
		p.i++
		for {
			if p.i >= len(p.s) {
				return nil, fmt.Errorf("expression %q: unterminated string", p.s)
			}
			if p.s[p.i] == '\'' {
				if p.i+1 < len(p.s) && p.s[p.i+1] == '\'' {
					b.WriteByte('\'')
					p.i += 2
					continue
				}
				p.i++
				break
			}
			b.WriteByte(p.s[p.i])
			p.i++
		}
		n = &armNode{kind: "str", str: b.String()}
	case c == '-' || (c >= '0' && c <= '9'):
		j := p.i + 1
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		n = &armNode{kind: "int", str: p.s[p.i:j]}
		p.i = j
	case isIdentStart(c):
		j := p.i
		for j < len(p.s) && (isIdentStart(p.s[j]) || (p.s[j] >= '0' && p.s[j] <= '9') || p.s[j] == '.') {
			j++
		}
		name := p.s[p.i:j]
		p.i = j
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '(' {
			return nil, fmt.Errorf("expression %q: %s is not a function call", p.s, name)
		}
		p.i++
		n = &armNode{kind: "call", str: name}
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ')' {
			p.i++
			break
		}
		for {
			a, err := p.expr()
			if err != nil {
				return nil, err
			}
			n.args = append(n.args, a)
			p.space()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == ')' {
				p.i++
				break
			}
			return nil, fmt.Errorf("expression %q: want , or ) at offset %d", p.s, p.i)
		}
	default:
		return nil, fmt.Errorf("expression %q: unexpected %q at offset %d", p.s, c, p.i)
	}
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == '.' {
			p.i++
			j := p.i
			for j < len(p.s) && (isIdentStart(p.s[j]) || (p.s[j] >= '0' && p.s[j] <= '9')) {
				j++
			}
			if j == p.i {
				return nil, fmt.Errorf("expression %q: a property name after . at offset %d", p.s, p.i)
			}
			n = &armNode{kind: "prop", str: p.s[p.i:j], args: []*armNode{n}}
			p.i = j
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == '[' {
			p.i++
			idx, err := p.expr()
			if err != nil {
				return nil, err
			}
			p.space()
			if p.i >= len(p.s) || p.s[p.i] != ']' {
				return nil, fmt.Errorf("expression %q: want ] at offset %d", p.s, p.i)
			}
			p.i++
			n = &armNode{kind: "index", args: []*armNode{n, idx}}
			continue
		}
		return n, nil
	}
}

func isIdentStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// String prints n back as a (canonical) ARM expression.
func (n *armNode) String() string {
	switch n.kind {
	case "str":
		return armLit(n.str)
	case "int":
		return n.str
	case "prop":
		return n.args[0].String() + "." + n.str
	case "index":
		return n.args[0].String() + "[" + n.args[1].String() + "]"
	}
	var parts []string
	for _, a := range n.args {
		parts = append(parts, a.String())
	}
	return n.str + "(" + strings.Join(parts, ", ") + ")"
}

// armValue reports whether a template string is an expression: "[...]"
// but not "[[...", ARM's escape of a literal bracket.
func armValue(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' && !strings.HasPrefix(s, "[[") {
		return s[1 : len(s)-1], true
	}
	return strings.TrimPrefix(s, "["), false
}

// bicepResource is a resource of the template being translated.
type bicepResource struct {
	sym      string
	typ, api string
	ids      []string // the canonical resourceId/extensionResourceId expressions naming it
	body     map[string]any
}

type bicepWriter struct {
	buf   bytes.Buffer
	byID  map[string]*bicepResource
	names map[string]bool
}

var bicepIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// bicepKeywords may not name a symbol.
var bicepKeywords = map[string]bool{"param": true, "var": true, "resource": true, "output": true, "module": true, "metadata": true,
	"import": true, "type": true, "func": true, "if": true, "for": true, "in": true, "true": true, "false": true, "null": true,
	"existing": true, "targetScope": true}

// ARMToBicep translates an ARM deployment template (JSON) to Bicep.
func ARMToBicep(tmpl []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(tmpl))
	dec.UseNumber()
	var doc struct {
		Metadata   map[string]any            `json:"metadata"`
		Parameters map[string]map[string]any `json:"parameters"`
		Variables  map[string]any            `json:"variables"`
		Resources  []map[string]any          `json:"resources"`
		Outputs    map[string]map[string]any `json:"outputs"`
	}
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	w := &bicepWriter{byID: map[string]*bicepResource{}, names: map[string]bool{}}
	declare := func(name string) error {
		if !bicepIdent.MatchString(name) || bicepKeywords[name] {
			return fmt.Errorf("%q cannot be a Bicep identifier", name)
		}
		if w.names[strings.ToLower(name)] {
			return fmt.Errorf("%q is declared twice", name)
		}
		w.names[strings.ToLower(name)] = true
		return nil
	}
	for name := range doc.Parameters {
		if err := declare(name); err != nil {
			return nil, fmt.Errorf("parameter %w", err)
		}
	}
	for name := range doc.Variables {
		if err := declare(name); err != nil {
			return nil, fmt.Errorf("variable %w", err)
		}
	}
	// Symbols and the ids that name each resource.
	var resources []*bicepResource
	for i, r := range doc.Resources {
		typ, _ := r["type"].(string)
		api, _ := r["apiVersion"].(string)
		name, _ := r["name"].(string)
		if typ == "" || api == "" || name == "" {
			return nil, fmt.Errorf("resource %d: type, apiVersion and name are required", i)
		}
		br := &bicepResource{typ: typ, api: api, body: r}
		segs, err := nameSegments(name)
		if err != nil {
			return nil, fmt.Errorf("resource %d (%s): %w", i, typ, err)
		}
		id := &armNode{kind: "call", str: "resourceId", args: append([]*armNode{{kind: "str", str: typ}}, segs...)}
		if scope, ok := r["scope"].(string); ok {
			se, isExpr := armValue(scope)
			if !isExpr {
				return nil, fmt.Errorf("resource %d (%s): scope %q is not an expression", i, typ, scope)
			}
			sn, err := parseARMExpr(se)
			if err != nil {
				return nil, err
			}
			id = &armNode{kind: "call", str: "extensionResourceId", args: append([]*armNode{sn, {kind: "str", str: typ}}, segs...)}
		}
		br.ids = append(br.ids, id.String())
		base := bicepSymbolBase(typ)
		if last := segs[len(segs)-1]; last.kind == "str" {
			if pre, _ := doc.Variables["prefix"].(string); pre != "" && last.str != pre {
				last = &armNode{kind: "str", str: strings.TrimPrefix(last.str, pre+"-")}
			}
			base += "_" + strings.Trim(nonIdent.ReplaceAllString(last.str, "_"), "_")
		}
		sym := base
		for n := 2; w.names[strings.ToLower(sym)] || bicepKeywords[sym]; n++ {
			sym = base + strconv.Itoa(n)
		}
		if err := declare(sym); err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
		br.sym = sym
		for _, id := range br.ids {
			if w.byID[id] != nil {
				return nil, fmt.Errorf("resources %s and %s have the same id %s", w.byID[id].sym, sym, id)
			}
			w.byID[id] = br
		}
		resources = append(resources, br)
	}

	b := &w.buf
	b.WriteString("// byoc install stack (Bicep): generated from the same model as its ARM\n// template; deploy either one.\n\n")
	for _, k := range sortedKeys(doc.Metadata) {
		fmt.Fprintf(b, "metadata %s = ", k)
		if err := w.value(doc.Metadata[k], 0); err != nil {
			return nil, fmt.Errorf("metadata %s: %w", k, err)
		}
		b.WriteString("\n")
	}
	for _, name := range sortedKeys(doc.Parameters) {
		if err := w.param(name, doc.Parameters[name]); err != nil {
			return nil, fmt.Errorf("parameter %s: %w", name, err)
		}
	}
	for _, name := range sortedKeys(doc.Variables) {
		fmt.Fprintf(b, "\nvar %s = ", name)
		if err := w.value(doc.Variables[name], 0); err != nil {
			return nil, fmt.Errorf("variable %s: %w", name, err)
		}
		b.WriteString("\n")
	}
	for _, r := range resources {
		if err := w.resource(r); err != nil {
			return nil, fmt.Errorf("resource %s (%s): %w", r.sym, r.typ, err)
		}
	}
	for _, name := range sortedKeys(doc.Outputs) {
		o := doc.Outputs[name]
		t, _ := o["type"].(string)
		if err := declareOutput(name); err != nil {
			return nil, err
		}
		fmt.Fprintf(b, "\noutput %s %s = ", name, bicepType(t))
		if err := w.value(o["value"], 0); err != nil {
			return nil, fmt.Errorf("output %s: %w", name, err)
		}
		b.WriteString("\n")
	}
	return b.Bytes(), nil
}

func declareOutput(name string) error {
	if !bicepIdent.MatchString(name) || bicepKeywords[name] {
		return fmt.Errorf("output %q cannot be a Bicep identifier", name)
	}
	return nil
}

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9]+`)

// bicepSymbolBase is the start of a resource's symbol: a short word for
// its type.
func bicepSymbolBase(typ string) string {
	switch typ {
	case "Microsoft.ManagedIdentity/userAssignedIdentities":
		return "identity"
	case "Microsoft.KeyVault/vaults":
		return "vault"
	case "Microsoft.KeyVault/vaults/secrets":
		return "secret"
	case "Microsoft.Authorization/roleAssignments":
		return "roleAssignment"
	case "Microsoft.ContainerRegistry/registries":
		return "registry"
	case "Microsoft.Network/networkSecurityGroups":
		return "nsg"
	case "Microsoft.Network/publicIPAddresses":
		return "publicIp"
	case "Microsoft.Network/natGateways":
		return "natGateway"
	case "Microsoft.Network/virtualNetworks":
		return "vnet"
	case "Microsoft.Network/networkInterfaces":
		return "nic"
	case "Microsoft.Compute/virtualMachines":
		return "vm"
	case "Microsoft.Compute/virtualMachines/extensions":
		return "vmExtension"
	}
	return typ[strings.LastIndex(typ, "/")+1:]
}

// nameSegments splits a resource's name into resourceId's name
// arguments: "a/b" → 'a', 'b'; [concat(X, '/b')] → X, 'b'; [X] → X.
func nameSegments(name string) ([]*armNode, error) {
	e, isExpr := armValue(name)
	if !isExpr {
		var out []*armNode
		for _, s := range strings.Split(e, "/") {
			out = append(out, &armNode{kind: "str", str: s})
		}
		return out, nil
	}
	n, err := parseARMExpr(e)
	if err != nil {
		return nil, err
	}
	if n.kind == "call" && n.str == "concat" && len(n.args) == 2 && n.args[1].kind == "str" && strings.HasPrefix(n.args[1].str, "/") {
		return []*armNode{n.args[0], {kind: "str", str: n.args[1].str[1:]}}, nil
	}
	return []*armNode{n}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func bicepType(t string) string {
	switch strings.ToLower(t) {
	case "securestring":
		return "string"
	case "secureobject":
		return "object"
	}
	return strings.ToLower(t)
}

func (w *bicepWriter) param(name string, p map[string]any) error {
	b := &w.buf
	b.WriteString("\n")
	if md, ok := p["metadata"].(map[string]any); ok {
		if d, ok := md["description"].(string); ok {
			fmt.Fprintf(b, "@description(%s)\n", bicepString(d))
		}
	}
	t, _ := p["type"].(string)
	if strings.HasPrefix(strings.ToLower(t), "secure") {
		b.WriteString("@secure()\n")
	}
	if av, ok := p["allowedValues"]; ok {
		b.WriteString("@allowed(")
		if err := w.value(av, 0); err != nil {
			return err
		}
		b.WriteString(")\n")
	}
	for _, k := range []string{"minLength", "maxLength", "minValue", "maxValue"} {
		if v, ok := p[k]; ok {
			fmt.Fprintf(b, "@%s(%v)\n", k, v)
		}
	}
	fmt.Fprintf(b, "param %s %s", name, bicepType(t))
	if d, ok := p["defaultValue"]; ok {
		b.WriteString(" = ")
		if err := w.value(d, 0); err != nil {
			return err
		}
	}
	b.WriteString("\n")
	return nil
}

func (w *bicepWriter) resource(r *bicepResource) error {
	b := &w.buf
	fmt.Fprintf(b, "\nresource %s '%s@%s' = ", r.sym, r.typ, r.api)
	if c, ok := r.body["condition"]; ok {
		b.WriteString("if (")
		if err := w.value(c, 0); err != nil {
			return err
		}
		b.WriteString(") ")
	}
	b.WriteString("{\n")
	for _, k := range sortedKeys(r.body) {
		switch k {
		case "type", "apiVersion", "condition":
			continue
		}
		v := r.body[k]
		fmt.Fprintf(b, "  %s: ", k)
		switch k {
		case "scope":
			s, err := w.symbolOf(v)
			if err != nil {
				return fmt.Errorf("scope: %w", err)
			}
			b.WriteString(s)
		case "dependsOn":
			deps, _ := v.([]any)
			b.WriteString("[\n")
			for _, d := range deps {
				s, err := w.symbolOf(d)
				if err != nil {
					return fmt.Errorf("dependsOn: %w", err)
				}
				fmt.Fprintf(b, "    %s\n", s)
			}
			b.WriteString("  ]")
		default:
			if err := w.value(v, 1); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return nil
}

// symbolOf is the symbol of the resource a template value names by its
// id.
func (w *bicepWriter) symbolOf(v any) (string, error) {
	s, _ := v.(string)
	e, isExpr := armValue(s)
	if !isExpr {
		return "", fmt.Errorf("%q is not a resource id expression", s)
	}
	n, err := parseARMExpr(e)
	if err != nil {
		return "", err
	}
	r := w.byID[n.String()]
	if r == nil {
		return "", fmt.Errorf("%s names no resource of the template", s)
	}
	return r.sym, nil
}

func (w *bicepWriter) indent(level int) {
	for range level {
		w.buf.WriteString("  ")
	}
}

// value writes a template value (JSON decoded with UseNumber).
func (w *bicepWriter) value(v any, level int) error {
	b := &w.buf
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case json.Number:
		b.WriteString(v.String())
	case string:
		e, isExpr := armValue(v)
		if !isExpr {
			b.WriteString(bicepString(e))
			return nil
		}
		n, err := parseARMExpr(e)
		if err != nil {
			return err
		}
		return w.expr(n, level)
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteString("[\n")
		for _, e := range v {
			w.indent(level + 1)
			if err := w.value(e, level+1); err != nil {
				return err
			}
			b.WriteString("\n")
		}
		w.indent(level)
		b.WriteString("]")
	case map[string]any:
		if len(v) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteString("{\n")
		for _, k := range sortedKeys(v) {
			w.indent(level + 1)
			b.WriteString(bicepKey(k) + ": ")
			if err := w.value(v[k], level+1); err != nil {
				return err
			}
			b.WriteString("\n")
		}
		w.indent(level)
		b.WriteString("}")
	default:
		return fmt.Errorf("unexpected %T in the template", v)
	}
	return nil
}

func bicepKey(k string) string {
	if bicepIdent.MatchString(k) {
		return k
	}
	return bicepString(k)
}

// bicepString quotes s as a Bicep string literal.
func bicepString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`\'`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '$':
			if i+1 < len(s) && s[i+1] == '{' {
				b.WriteString(`\$`)
			} else {
				b.WriteByte('$')
			}
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// binaryOps are the ARM functions Bicep writes as operators.
var binaryOps = map[string]string{"equals": "==", "and": "&&", "or": "||", "less": "<", "lessOrEquals": "<=", "greater": ">", "greaterOrEquals": ">="}

// expr writes an ARM expression in Bicep's syntax.
func (w *bicepWriter) expr(n *armNode, level int) error {
	b := &w.buf
	args := func(want int) error {
		if want >= 0 && len(n.args) != want {
			return fmt.Errorf("%s takes %d arguments, has %d", n.str, want, len(n.args))
		}
		return nil
	}
	switch n.kind {
	case "str":
		b.WriteString(bicepString(n.str))
		return nil
	case "int":
		b.WriteString(n.str)
		return nil
	case "index":
		if err := w.expr(n.args[0], level); err != nil {
			return err
		}
		b.WriteString("[")
		if err := w.expr(n.args[1], level); err != nil {
			return err
		}
		b.WriteString("]")
		return nil
	case "prop":
		// reference(id of a declared resource, api).x is its symbol's
		// properties.x.
		if in := n.args[0]; in.kind == "call" && in.str == "reference" && len(in.args) == 2 {
			if r := w.byID[in.args[0].String()]; r != nil && in.args[1].kind == "str" && in.args[1].str == r.api {
				fmt.Fprintf(b, "%s.properties.%s", r.sym, n.str)
				return nil
			}
		}
		if err := w.expr(n.args[0], level); err != nil {
			return err
		}
		b.WriteString("." + n.str)
		return nil
	}
	switch n.str {
	case "parameters", "variables":
		if err := args(1); err != nil {
			return err
		}
		if n.args[0].kind != "str" {
			return fmt.Errorf("%s: a name, not %s", n.str, n.args[0])
		}
		b.WriteString(n.args[0].str)
		return nil
	case "true", "false", "null":
		if err := args(0); err != nil {
			return err
		}
		b.WriteString(n.str)
		return nil
	case "if":
		if err := args(3); err != nil {
			return err
		}
		b.WriteString("(")
		for i, sep := range []string{" ? ", " : ", ")"} {
			if err := w.expr(n.args[i], level); err != nil {
				return err
			}
			b.WriteString(sep)
		}
		return nil
	case "not":
		if err := args(1); err != nil {
			return err
		}
		b.WriteString("!(")
		if err := w.expr(n.args[0], level); err != nil {
			return err
		}
		b.WriteString(")")
		return nil
	case "resourceId", "extensionResourceId":
		if r := w.byID[n.String()]; r != nil {
			b.WriteString(r.sym + ".id")
			return nil
		}
	case "createArray":
		if len(n.args) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteString("[\n")
		for _, a := range n.args {
			w.indent(level + 1)
			if err := w.expr(a, level+1); err != nil {
				return err
			}
			b.WriteString("\n")
		}
		w.indent(level)
		b.WriteString("]")
		return nil
	case "createObject":
		if len(n.args)%2 != 0 {
			return fmt.Errorf("createObject with %d arguments", len(n.args))
		}
		if len(n.args) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteString("{\n")
		for i := 0; i < len(n.args); i += 2 {
			w.indent(level + 1)
			if k := n.args[i]; k.kind == "str" {
				b.WriteString(bicepKey(k.str))
			} else {
				// A computed key: an interpolated string.
				b.WriteString("'${")
				if err := w.expr(k, level+1); err != nil {
					return err
				}
				b.WriteString("}'")
			}
			b.WriteString(": ")
			if err := w.expr(n.args[i+1], level+1); err != nil {
				return err
			}
			b.WriteString("\n")
		}
		w.indent(level)
		b.WriteString("}")
		return nil
	}
	if op, ok := binaryOps[n.str]; ok {
		if len(n.args) < 2 || (n.str != "and" && n.str != "or" && len(n.args) != 2) {
			return fmt.Errorf("%s with %d arguments", n.str, len(n.args))
		}
		b.WriteString("(")
		for i, a := range n.args {
			if i > 0 {
				b.WriteString(" " + op + " ")
			}
			if err := w.expr(a, level); err != nil {
				return err
			}
		}
		b.WriteString(")")
		return nil
	}
	b.WriteString(n.str + "(")
	for i, a := range n.args {
		if i > 0 {
			b.WriteString(", ")
		}
		if err := w.expr(a, level); err != nil {
			return err
		}
	}
	b.WriteString(")")
	return nil
}
