// Package configschema is the byoc SDK's JSON Schema validator for
// component configs and outputs: a documented subset of draft 2020-12,
// with errors that name each field as a path such as "steps[0].script".
//
// It depends on the standard library only, so imsd and the byoc CLI check
// configs against the schemas plugins declare without linking the plugin
// runtime (gRPC, go-plugin). Package sdk re-exports it (sdk.Schema,
// sdk.CompileSchema, sdk.ValidateConfig) for plugin authors.
package configschema

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Schema is a compiled JSON Schema of a component config or of outputs.
//
// The SDK validates the part of JSON Schema (draft 2020-12) that describes
// configuration: type, enum, const, properties, required,
// additionalProperties, items, min/maxItems, uniqueItems, min/maxLength,
// pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum,
// multipleOf, min/maxProperties, propertyNames, patternProperties,
// dependentRequired, allOf, anyOf, oneOf, not, and $ref to the schema's
// own $defs. Annotations (title, description, default, examples, format,
// $comment, readOnly) are accepted and not checked; deprecated: true
// makes a value a warning (a Diagnostic of SeverityWarning), and
// sensitive: true (or writeOnly: true) marks a value secret
// (Schema.Sensitive lists such values, for byoc to mask everywhere). Any
// other keyword is refused when the schema is compiled, so a schema never
// silently checks less than it says.
//
// The validator is the SDK's own rather than a general JSON Schema
// library: every plugin process links it, and the libraries compile their
// meta-schemas at start-up, which would add milliseconds to every plugin
// launch.
type Schema struct {
	root *node
}

type node struct {
	// always is set for the boolean schemas true and false.
	always *bool

	types                        []string
	enum                         []any
	hasConst                     bool
	constVal                     any
	properties                   map[string]*node
	required                     []string
	additional                   *node
	items                        *node
	minItems, maxItems           *int
	uniqueItems                  bool
	minLength, maxLength         *int
	pattern                      *regexp.Regexp
	minimum, maximum             *float64
	exclMinimum, exclMaximum     *float64
	multipleOf                   *float64
	minProperties, maxProperties *int
	allOf, anyOf, oneOf          []*node
	not                          *node
	ref                          string
	patternProps                 []patternProp
	propertyNames                *node
	dependentRequired            map[string][]string
	// sensitive marks a secret value (sensitive or writeOnly); deprecated
	// makes a value a warning; description is the annotation, for
	// messages.
	sensitive, deprecated bool
	description           string

	defs map[string]*node // only on the root
	at   string           // where in the schema, for errors
}

var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "default": true,
	"examples": true, "format": true, "readOnly": true,
}

// patternProp is one entry of patternProperties.
type patternProp struct {
	re   *regexp.Regexp
	node *node
}

// Severities of a Diagnostic.
const (
	// SeverityError (the zero value) makes a config invalid.
	SeverityError = ""
	// SeverityWarning is worth saying but lets the config through: a
	// deprecated field, or what a plugin's Validate warns about.
	SeverityWarning = "warning"
)

// A Diagnostic is one problem found in a config: the path of the
// offending field and what is wrong with it.
type Diagnostic struct {
	// Field is the path of the offending config field, such as "steps[0].script".
	Field   string
	Message string
	// Hint, when set, says what would be right (the known fields, for an
	// unknown one; the regular expression, for a value of the wrong form).
	// It is not part of String.
	Hint string
	// Severity is SeverityError (empty) or SeverityWarning.
	Severity string
}

// IsWarning reports whether d is a warning, not an error.
func (d Diagnostic) IsWarning() bool { return d.Severity == SeverityWarning }

// Errors returns the diagnostics that are errors, dropping warnings.
func Errors(ds []Diagnostic) []Diagnostic {
	return slices.DeleteFunc(slices.Clone(ds), Diagnostic.IsWarning)
}

// String returns "field: message".
func (d Diagnostic) String() string {
	if d.Field == "" {
		return d.Message
	}
	return d.Field + ": " + d.Message
}

// Compile compiles a JSON Schema document.
func Compile(schema string) (*Schema, error) {
	var doc any
	dec := json.NewDecoder(strings.NewReader(schema))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("schema is not one JSON value")
	}
	c := &compiler{}
	root, err := c.compile(doc, "")
	if err != nil {
		return nil, err
	}
	for _, ref := range c.refs {
		name := strings.TrimPrefix(ref.ref, "#/$defs/")
		if root.defs[name] == nil {
			return nil, fmt.Errorf("schema %s: $ref %q: no such definition in $defs", ptr(ref.at), ref.ref)
		}
	}
	s := &Schema{root: root}
	memo := map[*node]int{}
	for _, n := range root.all(map[*node]bool{}, nil) {
		if _, err := s.sameValueChecks(n, memo); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// maxSameValueChecks bounds how many schemas check one value (through
// $ref, allOf, anyOf, oneOf and not, which apply to the same value).
const maxSameValueChecks = 10000

// sameValueChecks counts the schemas that checking one value against n
// visits without descending into the value, refusing a $ref cycle that
// never descends (validation would not end) and a schema that expands to
// more than maxSameValueChecks (a chain of allOf pairs doubles at each
// $ref). memo holds each node's count, -1 while it is being counted.
func (s *Schema) sameValueChecks(n *node, memo map[*node]int) (int, error) {
	if k, ok := memo[n]; ok {
		if k < 0 {
			return 0, fmt.Errorf("schema %s: $ref %q: a cycle of references that never descends into the value", ptr(n.at), n.ref)
		}
		return k, nil
	}
	memo[n] = -1
	count := 1
	for _, sub := range s.sameValue(n) {
		k, err := s.sameValueChecks(sub, memo)
		if err != nil {
			return 0, err
		}
		if count += k; count > maxSameValueChecks {
			return 0, fmt.Errorf("schema %s: checking one value would apply more than %d schemas (through $ref, allOf, anyOf, oneOf, not)", ptr(n.at), maxSameValueChecks)
		}
	}
	memo[n] = count
	return count, nil
}

// sameValue lists the subschemas of n that check the same value as n.
func (s *Schema) sameValue(n *node) []*node {
	same := slices.Concat(n.allOf, n.anyOf, n.oneOf)
	if n.not != nil {
		same = append(same, n.not)
	}
	if n.ref != "" {
		same = append(same, s.root.defs[strings.TrimPrefix(n.ref, "#/$defs/")])
	}
	return same
}

// all appends n and every node below it (not following $ref) to out.
func (n *node) all(seen map[*node]bool, out []*node) []*node {
	if n == nil || seen[n] {
		return out
	}
	seen[n] = true
	out = append(out, n)
	for _, sub := range slices.Concat(n.allOf, n.anyOf, n.oneOf, []*node{n.not, n.additional, n.items, n.propertyNames}) {
		out = sub.all(seen, out)
	}
	for _, pp := range n.patternProps {
		out = pp.node.all(seen, out)
	}
	for _, k := range slices.Sorted(maps.Keys(n.properties)) {
		out = n.properties[k].all(seen, out)
	}
	for _, k := range slices.Sorted(maps.Keys(n.defs)) {
		out = n.defs[k].all(seen, out)
	}
	return out
}

type compiler struct {
	refs []struct{ ref, at string }
}

func ptr(at string) string {
	if at == "" {
		return "at the root"
	}
	return "at " + at
}

func (c *compiler) compile(v any, at string) (*node, error) {
	if b, ok := v.(bool); ok {
		return &node{always: &b}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("schema %s: must be an object or a boolean", ptr(at))
	}
	n := &node{at: at}
	bad := func(k, want string) error { return fmt.Errorf("schema %s: %s: must be %s", ptr(at), k, want) }
	num := func(k string) (*float64, error) {
		f, ok := m[k].(float64)
		if !ok {
			return nil, bad(k, "a number")
		}
		return &f, nil
	}
	count := func(k string) (*int, error) {
		f, ok := m[k].(float64)
		if !ok || f < 0 || f != math.Trunc(f) {
			return nil, bad(k, "a non-negative integer")
		}
		i := int(f)
		return &i, nil
	}
	list := func(k string) ([]*node, error) {
		l, ok := m[k].([]any)
		if !ok || len(l) == 0 {
			return nil, bad(k, "a non-empty array of schemas")
		}
		out := make([]*node, len(l))
		for i, s := range l {
			var err error
			if out[i], err = c.compile(s, fmt.Sprintf("%s/%s/%d", at, k, i)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var err error
	for _, k := range keys {
		val := m[k]
		switch k {
		case "type":
			switch t := val.(type) {
			case string:
				n.types = []string{t}
			case []any:
				for _, e := range t {
					s, ok := e.(string)
					if !ok {
						return nil, bad(k, "a type name or an array of them")
					}
					n.types = append(n.types, s)
				}
			default:
				return nil, bad(k, "a type name or an array of them")
			}
			for _, t := range n.types {
				switch t {
				case "null", "boolean", "object", "array", "number", "integer", "string":
				default:
					return nil, fmt.Errorf("schema %s: type: unknown type %q", ptr(at), t)
				}
			}
		case "enum":
			l, ok := val.([]any)
			if !ok {
				return nil, bad(k, "an array")
			}
			n.enum = l
		case "const":
			n.hasConst, n.constVal = true, val
		case "properties":
			props, ok := val.(map[string]any)
			if !ok {
				return nil, bad(k, "an object of schemas")
			}
			n.properties = map[string]*node{}
			for name, s := range props {
				if n.properties[name], err = c.compile(s, at+"/properties/"+name); err != nil {
					return nil, err
				}
			}
		case "required":
			l, ok := val.([]any)
			if !ok {
				return nil, bad(k, "an array of property names")
			}
			for _, e := range l {
				s, ok := e.(string)
				if !ok {
					return nil, bad(k, "an array of property names")
				}
				n.required = append(n.required, s)
			}
		case "additionalProperties":
			if n.additional, err = c.compile(val, at+"/"+k); err != nil {
				return nil, err
			}
		case "items":
			if n.items, err = c.compile(val, at+"/"+k); err != nil {
				return nil, err
			}
		case "minItems":
			n.minItems, err = count(k)
		case "maxItems":
			n.maxItems, err = count(k)
		case "uniqueItems":
			b, ok := val.(bool)
			if !ok {
				return nil, bad(k, "a boolean")
			}
			n.uniqueItems = b
		case "minLength":
			n.minLength, err = count(k)
		case "maxLength":
			n.maxLength, err = count(k)
		case "minProperties":
			n.minProperties, err = count(k)
		case "maxProperties":
			n.maxProperties, err = count(k)
		case "pattern":
			s, ok := val.(string)
			if !ok {
				return nil, bad(k, "a regular expression")
			}
			if n.pattern, err = regexp.Compile(s); err != nil {
				return nil, fmt.Errorf("schema %s: pattern: %w", ptr(at), err)
			}
		case "minimum":
			n.minimum, err = num(k)
		case "maximum":
			n.maximum, err = num(k)
		case "exclusiveMinimum":
			n.exclMinimum, err = num(k)
		case "exclusiveMaximum":
			n.exclMaximum, err = num(k)
		case "multipleOf":
			if n.multipleOf, err = num(k); err == nil && *n.multipleOf <= 0 {
				err = bad(k, "greater than 0")
			}
		case "allOf":
			n.allOf, err = list(k)
		case "anyOf":
			n.anyOf, err = list(k)
		case "oneOf":
			n.oneOf, err = list(k)
		case "not":
			n.not, err = c.compile(val, at+"/not")
		case "$ref":
			s, ok := val.(string)
			if !ok || !strings.HasPrefix(s, "#/$defs/") {
				return nil, bad(k, `a reference into the schema's own $defs ("#/$defs/name")`)
			}
			n.ref = s
			c.refs = append(c.refs, struct{ ref, at string }{s, at})
		case "patternProperties":
			props, ok := val.(map[string]any)
			if !ok {
				return nil, bad(k, "an object of schemas by regular expression")
			}
			for _, re := range slices.Sorted(maps.Keys(props)) {
				rx, err := regexp.Compile(re)
				if err != nil {
					return nil, fmt.Errorf("schema %s: patternProperties: %q: %w", ptr(at), re, err)
				}
				sub, err := c.compile(props[re], at+"/patternProperties/"+re)
				if err != nil {
					return nil, err
				}
				n.patternProps = append(n.patternProps, patternProp{re: rx, node: sub})
			}
		case "propertyNames":
			n.propertyNames, err = c.compile(val, at+"/propertyNames")
		case "dependentRequired":
			deps, ok := val.(map[string]any)
			if !ok {
				return nil, bad(k, "an object of arrays of property names")
			}
			n.dependentRequired = map[string][]string{}
			for name, l := range deps {
				list, ok := l.([]any)
				if !ok {
					return nil, bad(k+"."+name, "an array of property names")
				}
				for _, e := range list {
					s, ok := e.(string)
					if !ok {
						return nil, bad(k+"."+name, "an array of property names")
					}
					n.dependentRequired[name] = append(n.dependentRequired[name], s)
				}
			}
		case "sensitive", "writeOnly", "deprecated":
			b, ok := val.(bool)
			if !ok {
				return nil, bad(k, "a boolean")
			}
			if k == "deprecated" {
				n.deprecated = b
			} else {
				n.sensitive = n.sensitive || b
			}
		case "description":
			s, ok := val.(string)
			if !ok {
				return nil, bad(k, "a string")
			}
			n.description = s
		case "$defs":
			if at != "" {
				return nil, fmt.Errorf("schema %s: $defs: only allowed at the root", ptr(at))
			}
			defs, ok := val.(map[string]any)
			if !ok {
				return nil, bad(k, "an object of schemas")
			}
			n.defs = map[string]*node{}
			for name, s := range defs {
				if n.defs[name], err = c.compile(s, "/$defs/"+name); err != nil {
					return nil, err
				}
			}
		default:
			if !annotations[k] {
				return nil, fmt.Errorf("schema %s: keyword %q is not supported by the byoc SDK", ptr(at), k)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}

// Validate checks v (a config or outputs map as decoded from JSON) and
// returns one diagnostic per problem, each naming its field as a path such
// as "steps[0].script"; none means v is valid.
func (s *Schema) Validate(v any) []Diagnostic {
	return s.ValidateWith(v, Options{})
}

// Options change what Validate checks.
type Options struct {
	// Deferred reports whether a string stands for a value known only
	// later, such as a byoc config string holding a {{ }} reference that
	// is rendered at deploy time. Such a value could become anything, so
	// it passes every check (type, enum, length, pattern, ...); only a
	// field the schema forbids outright is still an error. Checks of the
	// values around it that depend on it (oneOf, not, enum, const and
	// uniqueItems of a value holding it) are skipped rather than guessed.
	Deferred func(s string) bool
}

// ValidateWith is Validate with options.
func (s *Schema) ValidateWith(v any, opts Options) []Diagnostic {
	// Round-trip through JSON so every value has a JSON type (numbers are
	// float64), whatever Go types the caller used.
	b, err := json.Marshal(v)
	if err != nil {
		return []Diagnostic{{Message: "not JSON: " + err.Error()}}
	}
	var inst any
	if err := json.Unmarshal(b, &inst); err != nil {
		return []Diagnostic{{Message: "not JSON: " + err.Error()}}
	}
	var diags []Diagnostic
	c := &checker{s: s, deferred: opts.Deferred}
	c.check(s.root, inst, nil, &diags)
	slices.SortStableFunc(diags, func(a, b Diagnostic) int { return strings.Compare(a.Field, b.Field) })
	return slices.CompactFunc(diags, func(a, b Diagnostic) bool { return a == b })
}

// checker is one validation run.
type checker struct {
	s        *Schema
	deferred func(string) bool
}

// isDeferred reports whether v is a string standing for a later value.
func (c *checker) isDeferred(v any) bool {
	str, ok := v.(string)
	return ok && c.deferred != nil && c.deferred(str)
}

// holdsDeferred reports whether v is or contains a deferred value.
func (c *checker) holdsDeferred(v any) bool {
	if c.deferred == nil {
		return false
	}
	switch x := v.(type) {
	case []any:
		return slices.ContainsFunc(x, c.holdsDeferred)
	case map[string]any:
		for _, e := range x {
			if c.holdsDeferred(e) {
				return true
			}
		}
		return false
	}
	return c.isDeferred(v)
}

// check validates v against n, appending problems at path.
func (c *checker) check(n *node, v any, path []string, out *[]Diagnostic) {
	s := c.s
	add := func(p []string, format string, args ...any) {
		*out = append(*out, Diagnostic{Field: FieldPath(p), Message: fmt.Sprintf(format, args...)})
	}
	if n.always != nil {
		if !*n.always {
			add(path, "is not allowed")
		}
		return
	}
	if n.deprecated {
		d := Diagnostic{Field: FieldPath(path), Message: "is deprecated", Severity: SeverityWarning}
		if n.description != "" {
			d.Hint = n.description
		}
		*out = append(*out, d)
	}
	if c.isDeferred(v) {
		return
	}
	// held: v holds a deferred value; computed only for the checks it
	// changes.
	held := (n.enum != nil || n.hasConst || n.uniqueItems || n.oneOf != nil || n.not != nil) && c.holdsDeferred(v)
	if n.ref != "" {
		c.check(s.root.defs[strings.TrimPrefix(n.ref, "#/$defs/")], v, path, out)
	}
	if len(n.types) > 0 && !slices.ContainsFunc(n.types, func(t string) bool { return isType(v, t) }) {
		add(path, "got %s, want %s", typeOf(v), strings.Join(n.types, " or "))
		return
	}
	if n.enum != nil && !held && !slices.ContainsFunc(n.enum, func(e any) bool { return reflect.DeepEqual(e, v) }) {
		add(path, "must be one of %s", jsonList(n.enum))
	}
	if n.hasConst && !held && !reflect.DeepEqual(n.constVal, v) {
		add(path, "must be %s", jsonText(n.constVal))
	}
	switch x := v.(type) {
	case map[string]any:
		for _, r := range n.required {
			if _, ok := x[r]; !ok {
				add(append(slices.Clone(path), r), "is required")
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := append(slices.Clone(path), k)
			if n.propertyNames != nil {
				var d []Diagnostic
				c.check(n.propertyNames, k, nil, &d)
				for _, e := range Errors(d) {
					*out = append(*out, Diagnostic{Field: FieldPath(p), Message: "is not an allowed field name: " + e.Message, Hint: e.Hint})
				}
			}
			if deps := n.dependentRequired[k]; len(deps) > 0 {
				for _, dep := range deps {
					if _, ok := x[dep]; !ok {
						add(append(slices.Clone(path), dep), "is required when %s is set", k)
					}
				}
			}
			matched := false
			for _, pp := range n.patternProps {
				if pp.re.MatchString(k) {
					matched = true
					c.check(pp.node, x[k], p, out)
				}
			}
			if sub, ok := n.properties[k]; ok {
				c.check(sub, x[k], p, out)
			} else if !matched && n.additional != nil {
				if n.additional.always != nil && !*n.additional.always {
					d := Diagnostic{Field: FieldPath(p), Message: "unknown field"}
					var hints []string
					if len(n.properties) > 0 {
						hints = append(hints, "known fields: "+strings.Join(slices.Sorted(maps.Keys(n.properties)), ", "))
					}
					for _, pp := range n.patternProps {
						hints = append(hints, "or a name matching the regular expression "+pp.re.String())
					}
					if len(hints) > 0 && len(n.properties) == 0 {
						hints[0] = strings.TrimPrefix(hints[0], "or ")
					}
					d.Hint = strings.Join(hints, " ")
					*out = append(*out, d)
				} else {
					c.check(n.additional, x[k], p, out)
				}
			}
		}
		if n.minProperties != nil && len(x) < *n.minProperties {
			add(path, "must have at least %d fields", *n.minProperties)
		}
		if n.maxProperties != nil && len(x) > *n.maxProperties {
			add(path, "must have at most %d fields", *n.maxProperties)
		}
	case []any:
		if n.items != nil {
			for i, e := range x {
				c.check(n.items, e, append(slices.Clone(path), strconv.Itoa(i)), out)
			}
		}
		if n.minItems != nil && len(x) < *n.minItems {
			add(path, "must have at least %d items", *n.minItems)
		}
		if n.maxItems != nil && len(x) > *n.maxItems {
			add(path, "must have at most %d items", *n.maxItems)
		}
		if n.uniqueItems && !held {
			for i := range x {
				for j := i + 1; j < len(x); j++ {
					if reflect.DeepEqual(x[i], x[j]) {
						add(path, "items %d and %d are equal; items must be unique", i, j)
					}
				}
			}
		}
	case string:
		l := utf8.RuneCountInString(x)
		if n.minLength != nil && l < *n.minLength {
			if *n.minLength == 1 {
				add(path, "must not be empty")
			} else {
				add(path, "must be at least %d characters", *n.minLength)
			}
		}
		if n.maxLength != nil && l > *n.maxLength {
			add(path, "must be at most %d characters", *n.maxLength)
		}
		if n.pattern != nil && !n.pattern.MatchString(x) {
			// For people: what the field is, if the schema says; the
			// regular expression is in the hint.
			msg := "is not in the required form"
			if n.description != "" {
				msg += " (" + n.description + ")"
			}
			*out = append(*out, Diagnostic{Field: FieldPath(path), Message: msg, Hint: "must match the regular expression " + n.pattern.String()})
		}
	case float64:
		if n.minimum != nil && x < *n.minimum {
			add(path, "must be at least %g", *n.minimum)
		}
		if n.maximum != nil && x > *n.maximum {
			add(path, "must be at most %g", *n.maximum)
		}
		if n.exclMinimum != nil && x <= *n.exclMinimum {
			add(path, "must be greater than %g", *n.exclMinimum)
		}
		if n.exclMaximum != nil && x >= *n.exclMaximum {
			add(path, "must be less than %g", *n.exclMaximum)
		}
		if n.multipleOf != nil {
			if q := x / *n.multipleOf; math.Abs(q-math.Round(q)) > 1e-9 {
				add(path, "must be a multiple of %g", *n.multipleOf)
			}
		}
	}
	for _, sub := range n.allOf {
		c.check(sub, v, path, out)
	}
	if len(n.anyOf) > 0 {
		if c.matches(n.anyOf, v) == 0 {
			add(path, "matches none of the allowed forms (anyOf)")
		}
	}
	// A deferred value matches every form, so oneOf and not would fail
	// where the rendered value may well pass.
	if len(n.oneOf) > 0 {
		if m := c.matches(n.oneOf, v); m == 0 || (m > 1 && !held) {
			add(path, "must match exactly one of the allowed forms (oneOf), matches %d", m)
		}
	}
	if n.not != nil && !held {
		var d []Diagnostic
		c.check(n.not, v, path, &d)
		if len(Errors(d)) == 0 {
			add(path, "matches a form that is not allowed (not)")
		}
	}
}

// matches counts the schemas in alts that v is valid against.
func (c *checker) matches(alts []*node, v any) int {
	count := 0
	for _, a := range alts {
		var d []Diagnostic
		c.check(a, v, nil, &d)
		if len(Errors(d)) == 0 {
			count++
		}
	}
	return count
}

func isType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case map[string]any:
		return t == "object"
	case []any:
		return t == "array"
	case string:
		return t == "string"
	case float64:
		return t == "number" || (t == "integer" && x == math.Trunc(x) && !math.IsInf(x, 0))
	}
	return false
}

func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case float64:
		if x == math.Trunc(x) {
			return "integer"
		}
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonList(l []any) string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = jsonText(e)
	}
	return strings.Join(parts, ", ")
}

// FieldPath writes a JSON value's location as a field path: ["steps", "0",
// "script"] becomes "steps[0].script".
func FieldPath(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// ValidateConfig checks config against the JSON Schema schema and returns
// one diagnostic per problem, naming its field. An error means the schema
// itself is broken. An empty schema accepts everything.
func ValidateConfig(schema string, config map[string]any) ([]Diagnostic, error) {
	if strings.TrimSpace(schema) == "" {
		return nil, nil
	}
	s, err := Compile(schema)
	if err != nil {
		return nil, err
	}
	if config == nil {
		config = map[string]any{}
	}
	return s.Validate(config), nil
}

// TypesAt returns the JSON types ("string", "integer", ...) the schema
// declares for the value at loc (object keys and array indexes, as in
// FieldPath), through properties, additionalProperties, items, $ref and
// every branch of allOf, anyOf and oneOf; nil when it declares none there.
func (s *Schema) TypesAt(loc []string) []string {
	var out []string
	s.typesAt(s.root, loc, &out, 0)
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *Schema) typesAt(n *node, loc []string, out *[]string, depth int) {
	if n == nil || depth > 64 { // $ref cycles
		return
	}
	if n.ref != "" {
		s.typesAt(s.root.defs[strings.TrimPrefix(n.ref, "#/$defs/")], loc, out, depth+1)
	}
	for _, alts := range [][]*node{n.allOf, n.anyOf, n.oneOf} {
		for _, a := range alts {
			s.typesAt(a, loc, out, depth+1)
		}
	}
	if len(loc) == 0 {
		*out = append(*out, n.types...)
		return
	}
	k, rest := loc[0], loc[1:]
	if sub, ok := n.properties[k]; ok {
		s.typesAt(sub, rest, out, depth+1)
	} else if n.additional != nil {
		s.typesAt(n.additional, rest, out, depth+1)
	}
	if _, err := strconv.Atoi(k); err == nil && n.items != nil {
		s.typesAt(n.items, rest, out, depth+1)
	}
}

// Sensitive returns the values in v (a config) that the schema marks
// sensitive (sensitive: true or writeOnly: true), as the strings they
// would be printed as: a string as it is, a number or boolean as JSON,
// and every such leaf of an object or array marked sensitive. It follows
// properties, patternProperties, additionalProperties, items, $ref and
// every branch of allOf, anyOf and oneOf. byoc redacts these values from
// everything a job sends back and masks them in every read of the job's
// config.
func (s *Schema) Sensitive(v any) []string {
	if s == nil {
		return nil
	}
	var out []string
	s.sensitiveIn(s.root, v, &out, 0)
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *Schema) sensitiveIn(n *node, v any, out *[]string, depth int) {
	if n == nil || v == nil || depth > 64 {
		return
	}
	if n.sensitive {
		leaves(v, out)
		return
	}
	if n.ref != "" {
		s.sensitiveIn(s.root.defs[strings.TrimPrefix(n.ref, "#/$defs/")], v, out, depth+1)
	}
	for _, alts := range [][]*node{n.allOf, n.anyOf, n.oneOf} {
		for _, a := range alts {
			s.sensitiveIn(a, v, out, depth+1)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			matched := false
			for _, pp := range n.patternProps {
				if pp.re.MatchString(k) {
					matched = true
					s.sensitiveIn(pp.node, e, out, depth+1)
				}
			}
			if sub, ok := n.properties[k]; ok {
				s.sensitiveIn(sub, e, out, depth+1)
			} else if !matched {
				s.sensitiveIn(n.additional, e, out, depth+1)
			}
		}
	case []any:
		for _, e := range x {
			s.sensitiveIn(n.items, e, out, depth+1)
		}
	}
}

// leaves appends every scalar in v as text.
func leaves(v any, out *[]string) {
	switch x := v.(type) {
	case nil:
	case string:
		if x != "" {
			*out = append(*out, x)
		}
	case map[string]any:
		for _, e := range x {
			leaves(e, out)
		}
	case []any:
		for _, e := range x {
			leaves(e, out)
		}
	default:
		*out = append(*out, jsonText(x))
	}
}
