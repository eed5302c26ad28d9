package stack

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// No Bicep compiler can be installed here (it is a .NET program shipped
// on NuGet and GitHub; Debian has none, and npm's bicep-node downloads
// it at run time), so the generated Bicep is checked by checkBicep: a
// tokenizer and a grammar check of the subset Bicep writes, and a
// comparison with the ARM template it was made from.

type bicepTok struct {
	kind string // ident, str, num, punct, strOpen (a string with interpolation), nl
	text string
	line int
}

// tokenizeBicep splits src into tokens; an interpolated string's
// expressions are tokenized in place, between strOpen and strClose.
func tokenizeBicep(src string) ([]bicepTok, error) {
	var toks []bicepTok
	line := 1
	i := 0
	var str func() error
	var expr func(stopAtBrace bool) error
	str = func() error {
		// At the opening quote.
		i++
		interp := false
		for {
			if i >= len(src) || src[i] == '\n' {
				return fmt.Errorf("line %d: unterminated string", line)
			}
			switch c := src[i]; {
			case c == '\\':
				if i+1 >= len(src) || !strings.ContainsRune(`\'nrt$`, rune(src[i+1])) {
					return fmt.Errorf("line %d: bad escape in a string", line)
				}
				i += 2
			case c == '\'':
				i++
				if interp {
					toks = append(toks, bicepTok{"strClose", "", line})
				} else {
					toks = append(toks, bicepTok{"str", "", line})
				}
				return nil
			case c == '$' && i+1 < len(src) && src[i+1] == '{':
				if !interp {
					toks = append(toks, bicepTok{"strOpen", "", line})
					interp = true
				}
				i += 2
				if err := expr(true); err != nil {
					return err
				}
			default:
				i++
			}
		}
	}
	expr = func(stopAtBrace bool) error {
		depth := 0
		for i < len(src) {
			c := src[i]
			switch {
			case c == '\n':
				toks = append(toks, bicepTok{"nl", "", line})
				line++
				i++
			case c == ' ' || c == '\t' || c == '\r':
				i++
			case c == '/' && i+1 < len(src) && src[i+1] == '/':
				for i < len(src) && src[i] != '\n' {
					i++
				}
			case c == '\'':
				if err := str(); err != nil {
					return err
				}
			case isIdentStart(c):
				j := i
				for j < len(src) && (isIdentStart(src[j]) || (src[j] >= '0' && src[j] <= '9')) {
					j++
				}
				toks = append(toks, bicepTok{"ident", src[i:j], line})
				i = j
			case c >= '0' && c <= '9':
				j := i
				for j < len(src) && src[j] >= '0' && src[j] <= '9' {
					j++
				}
				toks = append(toks, bicepTok{"num", src[i:j], line})
				i = j
			default:
				for _, op := range []string{"==", "!=", "&&", "||", "<=", ">="} {
					if strings.HasPrefix(src[i:], op) {
						toks = append(toks, bicepTok{"punct", op, line})
						i += 2
						goto next
					}
				}
				if !strings.ContainsRune("{}[]():,.?=!@<>", rune(c)) {
					return fmt.Errorf("line %d: unexpected %q", line, c)
				}
				if stopAtBrace && c == '{' {
					depth++
				}
				if stopAtBrace && c == '}' {
					if depth == 0 {
						i++
						return nil
					}
					depth--
				}
				toks = append(toks, bicepTok{"punct", string(c), line})
				i++
			next:
			}
		}
		if stopAtBrace {
			return fmt.Errorf("line %d: unterminated interpolation", line)
		}
		return nil
	}
	err := expr(false)
	return toks, err
}

// bicepFunctions are the Bicep functions a generated stack may call (a
// name ARM has and Bicep lacks, such as createObject or parameters,
// fails the check).
var bicepFunctions = map[string]bool{"concat": true, "uniqueString": true, "resourceGroup": true, "resourceId": true, "subscription": true,
	"subscriptionResourceId": true, "extensionResourceId": true, "guid": true, "empty": true, "union": true, "base64": true, "string": true,
	"deployment": true, "cidrSubnet": true, "utcNow": true, "reference": true, "description": true, "secure": true, "allowed": true,
	"minLength": true, "maxLength": true, "minValue": true, "maxValue": true}

type bicepDecls struct {
	params    map[string]string // name → type
	vars      []string
	resources map[string]string // symbol → type@api
	cond      map[string]bool   // symbol → has a condition
	outputs   []string
}

// checkBicep checks src's grammar: balanced brackets, terminated
// strings, only declarations at the top level, each name declared once,
// every name used declared, every function one of Bicep's.
func checkBicep(src string) (*bicepDecls, error) {
	toks, err := tokenizeBicep(src)
	if err != nil {
		return nil, err
	}
	d := &bicepDecls{params: map[string]string{}, resources: map[string]string{}, cond: map[string]bool{}}
	declared := map[string]int{}
	var stack []string
	pairs := map[string]string{")": "(", "]": "[", "}": "{"}
	var uses []bicepTok
	atLineStart := true
	for k := 0; k < len(toks); k++ {
		t := toks[k]
		if t.kind == "nl" {
			atLineStart = true
			continue
		}
		first := atLineStart
		atLineStart = false
		if len(stack) == 0 && first {
			// A declaration or a decorator.
			if t.kind == "punct" && t.text == "@" {
				continue
			}
			if t.kind != "ident" {
				return nil, fmt.Errorf("line %d: a declaration must start the line, not %q", t.line, t.text)
			}
			name := toks[k+1]
			if name.kind != "ident" {
				return nil, fmt.Errorf("line %d: %s without a name", t.line, t.text)
			}
			switch t.text {
			case "metadata", "var":
				if toks[k+2].text != "=" {
					return nil, fmt.Errorf("line %d: %s %s without =", t.line, t.text, name.text)
				}
				if t.text == "var" {
					d.vars = append(d.vars, name.text)
					declared[strings.ToLower(name.text)]++
				}
				k += 2
			case "param", "output":
				typ := toks[k+2]
				if typ.kind != "ident" || !slices.Contains([]string{"string", "bool", "int", "object", "array"}, typ.text) {
					return nil, fmt.Errorf("line %d: %s %s has no type", t.line, t.text, name.text)
				}
				if t.text == "param" {
					d.params[name.text] = typ.text
					declared[strings.ToLower(name.text)]++
				} else {
					if slices.Contains(d.outputs, name.text) {
						return nil, fmt.Errorf("line %d: output %s declared twice", t.line, name.text)
					}
					d.outputs = append(d.outputs, name.text)
					if toks[k+3].text != "=" {
						return nil, fmt.Errorf("line %d: output %s without =", t.line, name.text)
					}
				}
				k += 2
			case "resource":
				// resource NAME 'type@api' = [if (cond)] {
				if toks[k+2].kind != "str" || toks[k+3].text != "=" {
					return nil, fmt.Errorf("line %d: resource %s: want 'type@api' =", t.line, name.text)
				}
				declared[strings.ToLower(name.text)]++
				line := strings.Split(src, "\n")[t.line-1]
				q := strings.Index(line, "'")
				typeAPI := line[q+1 : q+1+strings.Index(line[q+1:], "'")]
				if strings.Count(typeAPI, "@") != 1 {
					return nil, fmt.Errorf("line %d: resource %s: %q is not type@apiVersion", t.line, name.text, typeAPI)
				}
				d.resources[name.text] = typeAPI
				if toks[k+4].text == "if" {
					d.cond[name.text] = true
					k += 4
				} else {
					k += 3
				}
			default:
				return nil, fmt.Errorf("line %d: %q cannot start a declaration", t.line, t.text)
			}
			continue
		}
		switch t.kind {
		case "punct":
			switch t.text {
			case "(", "[", "{":
				stack = append(stack, t.text)
			case ")", "]", "}":
				if len(stack) == 0 || stack[len(stack)-1] != pairs[t.text] {
					return nil, fmt.Errorf("line %d: unbalanced %s", t.line, t.text)
				}
				stack = stack[:len(stack)-1]
			}
		case "ident":
			prev := toks[k-1]
			next := toks[k+1]
			switch {
			case prev.text == ".":
				// A property.
			case next.text == "(":
				if !bicepFunctions[t.text] && t.text != "if" {
					return nil, fmt.Errorf("line %d: %s is not a Bicep function", t.line, t.text)
				}
			case first && next.text == ":" && len(stack) > 0 && stack[len(stack)-1] == "{":
				// An object's key.
			case t.text == "true" || t.text == "false" || t.text == "null":
			default:
				uses = append(uses, t)
			}
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unclosed %s at the end", strings.Join(stack, ""))
	}
	for name, n := range declared {
		if n > 1 {
			return nil, fmt.Errorf("%s declared %d times", name, n)
		}
	}
	for _, u := range uses {
		if declared[strings.ToLower(u.text)] == 0 {
			return nil, fmt.Errorf("line %d: %s is used but not declared", u.line, u.text)
		}
	}
	return d, nil
}

func TestCheckBicepCatches(t *testing.T) {
	ok := "param A string = 'x'\n\nresource r 'T/u@2020-01-01' = if (A == 'x') {\n  name: A\n  properties: {\n    k: '${r2.id}'\n  }\n}\n\nresource r2 'T/v@2020-01-01' = {\n  name: concat(A, 'y')\n}\n\noutput O string = r.id\n"
	if _, err := checkBicep(ok); err != nil {
		t.Fatalf("a good file: %v", err)
	}
	for name, bad := range map[string]string{
		"unbalanced":      strings.Replace(ok, "  }\n}", "  }\n", 1),
		"undeclared":      strings.Replace(ok, "name: A", "name: B", 1),
		"twice":           ok + "\nvar a = 1\n",
		"arm function":    strings.Replace(ok, "concat(A", "parameters('A'", 1),
		"bad escape":      strings.Replace(ok, "'x'", `'\x'`, 1),
		"no type":         strings.Replace(ok, "param A string", "param A", 1),
		"unterminated":    strings.Replace(ok, "'x')", "'x)", 1),
		"stray top level": ok + "\nname: A\n",
	} {
		if _, err := checkBicep(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestAzureBicep(t *testing.T) {
	o := exampleOptions(t)
	src, err := Bicep(o)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "example.azure.bicep", src)
	d, err := checkBicep(string(src))
	if err != nil {
		t.Fatalf("the generated Bicep: %v", err)
	}
	tmpl, err := Azure(o)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Parameters map[string]struct{ Type string }
		Variables  map[string]any
		Resources  []struct{ Type, APIVersion, Condition string }
		Outputs    map[string]any
	}
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	// The same parameters (and types), variables, outputs, and resource
	// types with their API versions and conditions.
	params := map[string]string{}
	for n, p := range doc.Parameters {
		params[n] = bicepType(p.Type)
	}
	if fmt.Sprint(params) != fmt.Sprint(d.params) {
		t.Errorf("parameters: ARM %v, Bicep %v", params, d.params)
	}
	if got, want := fmt.Sprint(sortedStrings(d.vars)), fmt.Sprint(sortedKeys(doc.Variables)); got != want {
		t.Errorf("variables: ARM %s, Bicep %s", want, got)
	}
	if got, want := fmt.Sprint(sortedStrings(d.outputs)), fmt.Sprint(sortedKeys(doc.Outputs)); got != want {
		t.Errorf("outputs: ARM %s, Bicep %s", want, got)
	}
	var armRes, bicepRes []string
	for _, r := range doc.Resources {
		armRes = append(armRes, fmt.Sprintf("%s@%s if=%v", r.Type, r.APIVersion, r.Condition != ""))
	}
	for sym, ta := range d.resources {
		bicepRes = append(bicepRes, fmt.Sprintf("%s if=%v", ta, d.cond[sym]))
	}
	if got, want := fmt.Sprint(sortedStrings(bicepRes)), fmt.Sprint(sortedStrings(armRes)); got != want {
		t.Errorf("resources:\nARM   %s\nBicep %s", want, got)
	}
	// Idioms: identities by symbol, never ARM's createObject.
	for _, want := range []string{"'${identity_agent.id}': {}", "principalId: identity_provision.properties.principalId", "scope: registry", "= if (EnableBreakGlass) {", "@secure()\n@minLength(1)\nparam EnrollmentToken string\n"} {
		if !strings.Contains(string(src), want) {
			t.Errorf("the Bicep lacks %q", want)
		}
	}
}

func sortedStrings(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestARMExprRoundTrip(t *testing.T) {
	for _, e := range []string{
		"concat('a''b', parameters('X'))",
		"reference(resourceId('T/u', 'n'), '2020-01-01').principalId",
		"if(equals(variables('v'), 'create'), createArray(1, -2), createObject())",
		"split('a/b', '/')[1]",
	} {
		n, err := parseARMExpr(e)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if n.String() != e {
			t.Errorf("%s printed back as %s", e, n.String())
		}
	}
	for _, e := range []string{"concat('a'", "foo", "'x", "a()b"} {
		if _, err := parseARMExpr(e); err == nil {
			t.Errorf("%s: no error", e)
		}
	}
}
