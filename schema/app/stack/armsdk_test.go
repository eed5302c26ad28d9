package stack

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	// The Azure SDK for Go's resource manager modules of the resource
	// types the Azure stack makes. Nothing here calls them: the test reads
	// their source (the imports keep them in go.mod, so go mod download
	// fetches them). They are generated from the same azure-rest-api-specs
	// documents as ARM's published resource schemas: each PUT operation's
	// resource type, api-version and body model, each model's JSON names,
	// REQUIRED and READ-ONLY fields, and each enum's values.
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/containerregistry/armcontainerregistry/v2"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/keyvault/armkeyvault"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	_ "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
)

// armSDKModules are the modules above.
var armSDKModules = []string{
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2",
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8",
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/containerregistry/armcontainerregistry/v2",
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/keyvault/armkeyvault",
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi",
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9",
}

// sdkPkg is what the test reads from one SDK module's source.
type sdkPkg struct {
	module  string
	structs map[string]*sdkStruct // by Go type name
	enums   map[string][]string   // string enum types' values
	ifaces  map[string]bool       // polymorphic (discriminated) model interfaces
	consts  map[string]string     // string constants (the api-versions)
}

// sdkStruct is a model: its fields by JSON name.
type sdkStruct struct {
	fields map[string]*sdkField
	open   bool // its UnmarshalJSON keeps unknown keys (additional properties)
}

type sdkField struct {
	goName             string
	typ                ast.Expr
	required, readOnly bool
}

// sdkPut is one PUT operation: the resource type it creates, at which
// api-version, with which body model.
type sdkPut struct {
	pkg                      *sdkPkg
	resourceType, apiVersion string
	body, op                 string
}

// armSDK is every PUT operation of the modules, by lower-case resource
// type (ARM's types are case-insensitive).
type armSDK map[string][]sdkPut

var armSDKCache armSDK

// loadARMSDK reads the modules' source from the module cache.
func loadARMSDK(t *testing.T) armSDK {
	t.Helper()
	if armSDKCache != nil {
		return armSDKCache
	}
	out, err := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}} {{.Dir}}"}, armSDKModules...)...).Output()
	if err != nil {
		t.Fatalf("go list -m (the Azure SDK modules): %v", err)
	}
	sdk := armSDK{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 || f[2] == "" {
			t.Fatalf("module %q is not downloaded (go mod download)", line)
		}
		pkg, puts, err := readSDKPkg(f[0]+"@"+f[1], f[2])
		if err != nil {
			t.Fatal(err)
		}
		if len(puts) == 0 {
			t.Fatalf("%s: no PUT operation found (has the generator's code changed shape?)", pkg.module)
		}
		for _, p := range puts {
			k := strings.ToLower(p.resourceType)
			sdk[k] = append(sdk[k], p)
		}
	}
	armSDKCache = sdk
	return sdk
}

// readSDKPkg parses a module's root package (its models, constants and
// clients).
func readSDKPkg(module, dir string) (*sdkPkg, []sdkPut, error) {
	pkg := &sdkPkg{module: module, structs: map[string]*sdkStruct{}, enums: map[string][]string{}, ifaces: map[string]bool{}, consts: map[string]string{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	// Types, enums and constants.
	fieldsByType := map[string][]*ast.Field{}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range gd.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					switch tt := s.Type.(type) {
					case *ast.StructType:
						fieldsByType[s.Name.Name] = tt.Fields.List
					case *ast.InterfaceType:
						pkg.ifaces[s.Name.Name] = true
					case *ast.Ident:
						if tt.Name == "string" {
							if _, ok := pkg.enums[s.Name.Name]; !ok {
								pkg.enums[s.Name.Name] = nil
							}
						}
					}
				case *ast.ValueSpec:
					if gd.Tok != token.CONST {
						continue
					}
					for i, n := range s.Names {
						if i >= len(s.Values) {
							continue
						}
						lit, ok := s.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, _ := strconv.Unquote(lit.Value)
						if id, ok := s.Type.(*ast.Ident); ok && id.Name != "string" {
							pkg.enums[id.Name] = append(pkg.enums[id.Name], v)
						} else {
							pkg.consts[n.Name] = v
						}
					}
				}
			}
		}
	}
	// The JSON names: each model's UnmarshalJSON, case "name": ... &x.Field.
	jsonNames := map[string]map[string]string{} // type → JSON name → Go field
	open := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != "UnmarshalJSON" || fd.Recv == nil || fd.Body == nil {
				continue
			}
			star, ok := fd.Recv.List[0].Type.(*ast.StarExpr)
			if !ok || len(fd.Recv.List[0].Names) == 0 {
				continue
			}
			typeName := star.X.(*ast.Ident).Name
			recv := fd.Recv.List[0].Names[0].Name
			names := map[string]string{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				cc, ok := n.(*ast.CaseClause)
				if !ok {
					return true
				}
				if cc.List == nil {
					open[typeName] = true
					return false
				}
				field := ""
				for _, st := range cc.Body {
					ast.Inspect(st, func(n ast.Node) bool {
						if se, ok := n.(*ast.SelectorExpr); ok && field == "" {
							if id, ok := se.X.(*ast.Ident); ok && id.Name == recv {
								field = se.Sel.Name
							}
						}
						return true
					})
				}
				for _, e := range cc.List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING && field != "" {
						k, _ := strconv.Unquote(lit.Value)
						names[k] = field
					}
				}
				return false
			})
			jsonNames[typeName] = names
		}
	}
	for name, fields := range fieldsByType {
		names, ok := jsonNames[name]
		if !ok {
			continue // not a model (clients, options, responses)
		}
		byGo := map[string]*ast.Field{}
		for _, fl := range fields {
			for _, n := range fl.Names {
				byGo[n.Name] = fl
			}
		}
		st := &sdkStruct{fields: map[string]*sdkField{}, open: open[name]}
		for k, goName := range names {
			fl, ok := byGo[goName]
			if !ok {
				return nil, nil, fmt.Errorf("%s: %s.UnmarshalJSON sets %s, not a field", module, name, goName)
			}
			doc := ""
			if fl.Doc != nil {
				doc = fl.Doc.Text()
			}
			st.fields[k] = &sdkField{goName: goName, typ: fl.Type,
				required: strings.HasPrefix(doc, "REQUIRED;"), readOnly: strings.HasPrefix(doc, "READ-ONLY;")}
		}
		pkg.structs[name] = st
	}
	// The PUT operations: each client's ...CreateRequest that builds a
	// PUT of urlPath with an api-version and marshals a body parameter.
	var puts []sdkPut
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Body == nil || !strings.HasSuffix(fd.Name.Name, "CreateRequest") {
				continue
			}
			var urlPath, apiVersion, bodyParam string
			isPut := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					if id, ok := n.Lhs[0].(*ast.Ident); ok && id.Name == "urlPath" && n.Tok == token.DEFINE {
						if lit, ok := n.Rhs[0].(*ast.BasicLit); ok {
							urlPath, _ = strconv.Unquote(lit.Value)
						}
					}
				case *ast.SelectorExpr:
					if n.Sel.Name == "MethodPut" {
						isPut = true
					}
				case *ast.CallExpr:
					se, ok := n.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if se.Sel.Name == "Set" && len(n.Args) == 2 {
						if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Value == `"api-version"` {
							switch a := n.Args[1].(type) {
							case *ast.BasicLit:
								apiVersion, _ = strconv.Unquote(a.Value)
							case *ast.Ident:
								apiVersion = pkg.consts[a.Name]
							}
						}
					}
					if se.Sel.Name == "MarshalAsJSON" && len(n.Args) == 2 {
						if id, ok := n.Args[1].(*ast.Ident); ok {
							bodyParam = id.Name
						}
					}
				}
				return true
			})
			if !isPut || bodyParam == "" || apiVersion == "" {
				continue
			}
			rt := armResourceType(urlPath)
			if rt == "" {
				continue // by id: the same operation as by name
			}
			body := ""
			for _, p := range fd.Type.Params.List {
				for _, n := range p.Names {
					if n.Name != bodyParam {
						continue
					}
					if id, ok := p.Type.(*ast.Ident); ok {
						body = id.Name
					}
				}
			}
			if body == "" {
				return nil, nil, fmt.Errorf("%s: %s: no body model for %s", module, fd.Name.Name, bodyParam)
			}
			recv := fd.Recv.List[0].Type.(*ast.StarExpr).X.(*ast.Ident).Name
			puts = append(puts, sdkPut{pkg: pkg, resourceType: rt, apiVersion: apiVersion, body: body,
				op: strings.TrimSuffix(recv, "Client") + "." + strings.TrimSuffix(fd.Name.Name, "CreateRequest")})
		}
	}
	return pkg, puts, nil
}

// armResourceType is the resource type of a PUT's URL path:
// .../providers/Microsoft.Compute/virtualMachines/{vmName}/extensions/{name}
// is Microsoft.Compute/virtualMachines/extensions; "" for a path not
// ending in a named resource.
func armResourceType(urlPath string) string {
	i := strings.LastIndex(urlPath, "/providers/")
	if i < 0 {
		return ""
	}
	segs := strings.Split(urlPath[i+len("/providers/"):], "/")
	if len(segs) < 3 || len(segs)%2 != 1 || strings.HasPrefix(segs[0], "{") {
		return ""
	}
	rt := segs[0]
	for j := 1; j < len(segs); j += 2 {
		if strings.HasPrefix(segs[j], "{") || !strings.HasPrefix(segs[j+1], "{") {
			return ""
		}
		rt += "/" + segs[j]
	}
	return rt
}

// armTemplateKeys are a template resource's keys that are ARM's, not the
// resource body's.
var armTemplateKeys = map[string]bool{"type": true, "apiVersion": true, "name": true, "condition": true, "dependsOn": true,
	"scope": true, "copy": true, "comments": true}

// isARMExpression: a string ARM evaluates ("[...]"; "[[" is a literal).
func isARMExpression(s string) bool {
	return strings.HasPrefix(s, "[") && !strings.HasPrefix(s, "[[") && strings.HasSuffix(s, "]")
}

// checkARMResources checks each resource of an ARM template against the
// SDK's body model of its type at its api-version; it returns a problem
// per line, each naming the resource and the JSON path.
func checkARMResources(sdk armSDK, tmpl []byte) ([]string, error) {
	var doc struct{ Resources []map[string]any }
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		return nil, err
	}
	var problems []string
	for i, r := range doc.Resources {
		rt, _ := r["type"].(string)
		api, _ := r["apiVersion"].(string)
		where := fmt.Sprintf("resources[%d] %s %q (%s)", i, rt, r["name"], api)
		puts := sdk[strings.ToLower(rt)]
		if len(puts) == 0 {
			problems = append(problems, where+": no SDK module describes this resource type")
			continue
		}
		var put *sdkPut
		var have []string
		for j := range puts {
			if puts[j].apiVersion == api {
				put = &puts[j]
				break
			}
			have = append(have, puts[j].apiVersion+" ("+puts[j].pkg.module+")")
		}
		if put == nil {
			problems = append(problems, where+": api-version not described by the SDK modules, which have "+strings.Join(have, ", "))
			continue
		}
		body := map[string]any{}
		for k, v := range r {
			if !armTemplateKeys[k] {
				body[k] = v
			}
		}
		c := sdkChecker{pkg: put.pkg, where: where}
		c.check("", body, &ast.Ident{Name: put.body})
		problems = append(problems, c.problems...)
	}
	return problems, nil
}

// checkARMReferences checks each reference(resourceId('Type', ...),
// 'api-version') of the template's expressions: a type and api-version
// the SDK modules describe, and a property read from it (.principalId)
// one of its model's properties.
func checkARMReferences(sdk armSDK, tmpl []byte) (problems []string, n int, err error) {
	var doc any
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		return nil, 0, err
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				walk(joinPath(path, k), v[k])
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		case string:
			if !isARMExpression(v) {
				return
			}
			for _, ref := range armReferences(v) {
				n++
				where := fmt.Sprintf("%s: reference(%s, '%s')", path, ref.resourceType, ref.apiVersion)
				var put *sdkPut
				for _, p := range sdk[strings.ToLower(ref.resourceType)] {
					if p.apiVersion == ref.apiVersion {
						put = &p
						break
					}
				}
				switch {
				case put == nil:
					problems = append(problems, where+": type and api-version not described by the SDK modules")
				case ref.property != "":
					body := put.pkg.structs[put.body]
					f := body.fields["properties"]
					var props *sdkStruct
					if f != nil {
						if st, ok := f.typ.(*ast.StarExpr); ok {
							if id, ok := st.X.(*ast.Ident); ok {
								props = put.pkg.structs[id.Name]
							}
						}
					}
					if props == nil || props.fields[ref.property] == nil {
						problems = append(problems, where+"."+ref.property+": not a property of the resource")
					}
				}
			}
		}
	}
	walk("", doc)
	return problems, n, nil
}

type armReference struct{ resourceType, apiVersion, property string }

// armReferences finds reference(resourceId('Type', ...), 'version')
// calls (and the property read from each) in an expression.
func armReferences(e string) []armReference {
	const call = "reference(resourceId('"
	var refs []armReference
	for i := strings.Index(e, call); i >= 0; i = nextIndex(e, call, i+1) {
		open := i + len("reference")
		end := armCallEnd(e, open)
		if end < 0 {
			continue
		}
		args := armSplitArgs(e[open+1 : end])
		if len(args) != 2 {
			continue
		}
		typeLit := strings.TrimPrefix(args[0], "resourceId(")
		rt, _, _ := strings.Cut(strings.TrimPrefix(typeLit, "'"), "'")
		ref := armReference{resourceType: rt, apiVersion: strings.Trim(strings.TrimSpace(args[1]), "'")}
		if rest := e[end+1:]; strings.HasPrefix(rest, ".") {
			n := 1
			for n < len(rest) && (rest[n] >= 'a' && rest[n] <= 'z' || rest[n] >= 'A' && rest[n] <= 'Z' || rest[n] >= '0' && rest[n] <= '9') {
				n++
			}
			ref.property = rest[1:n]
		}
		refs = append(refs, ref)
	}
	return refs
}

func nextIndex(s, sub string, from int) int {
	if j := strings.Index(s[from:], sub); j >= 0 {
		return from + j
	}
	return -1
}

// armCallEnd is the index of the parenthesis closing the one at open,
// skipping string literals.
func armCallEnd(e string, open int) int {
	depth := 0
	for i := open; i < len(e); i++ {
		switch e[i] {
		case '\'':
			i = armStringEnd(e, i)
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// armStringEnd is the index of the quote closing the string literal
// opening at i (two quotes inside it are one).
func armStringEnd(s string, i int) int {
	for i++; i < len(s); i++ {
		if s[i] == '\'' {
			if i+1 < len(s) && s[i+1] == '\'' {
				i++
				continue
			}
			return i
		}
	}
	return i
}

// armSplitArgs splits a call's arguments at its top-level commas.
func armSplitArgs(s string) []string {
	var args []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			i = armStringEnd(s, i)
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				args = append(args, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(args, strings.TrimSpace(s[start:]))
}

type sdkChecker struct {
	pkg      *sdkPkg
	where    string
	problems []string
}

func (c *sdkChecker) fail(path, format string, args ...any) {
	if path == "" {
		path = "(body)"
	}
	c.problems = append(c.problems, c.where+": "+path+": "+fmt.Sprintf(format, args...))
}

// check checks value v at path against Go type typ of the SDK.
func (c *sdkChecker) check(path string, v any, typ ast.Expr) {
	if s, ok := v.(string); ok && isARMExpression(s) {
		return // stands for a value of the right type
	}
	switch t := typ.(type) {
	case *ast.StarExpr:
		c.check(path, v, t.X)
	case *ast.ArrayType:
		if id, ok := t.Elt.(*ast.Ident); ok && id.Name == "byte" {
			if _, ok := v.(string); !ok {
				c.fail(path, "%s, want a string (base64)", jsonKind(v))
			}
			return
		}
		a, ok := v.([]any)
		if !ok {
			c.fail(path, "%s, want an array", jsonKind(v))
			return
		}
		for i, e := range a {
			c.check(fmt.Sprintf("%s[%d]", path, i), e, t.Elt)
		}
	case *ast.MapType:
		m, ok := v.(map[string]any)
		if !ok {
			c.fail(path, "%s, want an object", jsonKind(v))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			c.check(joinPath(path, k), m[k], t.Value)
		}
	case *ast.InterfaceType:
		// any: free-form (a VM extension's settings)
	case *ast.SelectorExpr:
		if x, ok := t.X.(*ast.Ident); ok && x.Name == "time" && t.Sel.Name == "Time" {
			if _, ok := v.(string); !ok {
				c.fail(path, "%s, want a date-time string", jsonKind(v))
			}
			return
		}
		c.fail(path, "type %s.%s is not known to the check", t.X, t.Sel.Name)
	case *ast.Ident:
		c.checkNamed(path, v, t.Name)
	default:
		c.fail(path, "Go type %T is not known to the check", typ)
	}
}

func (c *sdkChecker) checkNamed(path string, v any, name string) {
	switch name {
	case "string":
		if _, ok := v.(string); !ok {
			c.fail(path, "%s, want a string", jsonKind(v))
		}
		return
	case "bool":
		if _, ok := v.(bool); !ok {
			c.fail(path, "%s, want a boolean", jsonKind(v))
		}
		return
	case "int32", "int64", "int":
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			c.fail(path, "%s, want an integer", jsonKind(v))
		}
		return
	case "float32", "float64":
		if _, ok := v.(float64); !ok {
			c.fail(path, "%s, want a number", jsonKind(v))
		}
		return
	case "any":
		return
	}
	if values, ok := c.pkg.enums[name]; ok {
		s, isString := v.(string)
		if !isString {
			c.fail(path, "%s, want a string (%s)", jsonKind(v), name)
		} else if !slices.Contains(values, s) {
			c.fail(path, "%q is not one of %s's values %q", s, name, values)
		}
		return
	}
	if c.pkg.ifaces[name] {
		c.fail(path, "%s is polymorphic (a discriminated model), which the check does not follow", name)
		return
	}
	st, ok := c.pkg.structs[name]
	if !ok {
		c.fail(path, "model %s not found in %s", name, c.pkg.module)
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		c.fail(path, "%s, want an object (%s)", jsonKind(v), name)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f, ok := st.fields[k]
		switch {
		case !ok && st.open:
		case !ok:
			c.fail(joinPath(path, k), "unknown property (%s has %s)", name, strings.Join(slices.Sorted(maps.Keys(st.fields)), ", "))
		case f.readOnly:
			c.fail(joinPath(path, k), "read-only property of %s", name)
		default:
			c.check(joinPath(path, k), m[k], f.typ)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.fields)) {
		if _, ok := m[k]; !ok && st.fields[k].required {
			c.fail(joinPath(path, k), "required property of %s missing", name)
		}
	}
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func jsonKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case float64:
		return fmt.Sprintf("number %v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// TestAzureTemplatePublishedSchemas checks every resource of the Azure
// template, and of variants of it, against the Azure SDK for Go's model
// of its type at its api-version: unknown, missing required and read-only
// properties, enum values, JSON types. A type or api-version no module
// describes is an error, so the list cannot shrink unnoticed.
func TestAzureTemplatePublishedSchemas(t *testing.T) {
	sdk := loadARMSDK(t)
	breakGlass := exampleOptions(t)
	breakGlass.Params = map[string]string{"EnableBreakGlass": "true", "VnetMode": "existing", "VmSize": "Standard_D2s_v5"}
	breakGlass.Labels = map[string]string{"customer": "acme", "example.com/tier": "gold"}
	port443 := exampleOptions(t)
	port443.IMS = "https://ims.example.com"
	noPermissions := exampleOptions(t)
	noPermissions.App = exampleApp(t, map[string]string{"permissions.toml": ""})
	for name, o := range map[string]Options{"example": exampleOptions(t), "break glass on, existing subnet, labels": breakGlass,
		"imsd on 443": port443, "no permissions.toml": noPermissions} {
		tmpl, err := Azure(o)
		if err != nil {
			t.Fatal(err)
		}
		problems, err := checkARMResources(sdk, tmpl)
		if err != nil {
			t.Fatal(err)
		}
		refProblems, refs, err := checkARMReferences(sdk, tmpl)
		if err != nil {
			t.Fatal(err)
		}
		// The agent's and each mode's identity, Key Vault, the registry.
		if refs < 5 {
			t.Errorf("%s: only %d reference() calls found", name, refs)
		}
		for _, p := range append(problems, refProblems...) {
			t.Errorf("%s: %s", name, p)
		}
	}
}

// TestAzurePublishedSchemasCatch: the check refuses a copy of the
// template broken as a generator bug would break it.
func TestAzurePublishedSchemasCatch(t *testing.T) {
	sdk := loadARMSDK(t)
	tmpl, err := Azure(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		// An unknown property.
		{`"enableRbacAuthorization": true`, `"enableRbacAuthorisation": true`,
			`Microsoft.KeyVault/vaults "[variables('vaultName')]" (` + apiKeyVault + `): properties.enableRbacAuthorisation: unknown property (VaultProperties has`},
		// An enum value outside the set, at the top and in an array.
		{`"publicIPAllocationMethod": "Static"`, `"publicIPAllocationMethod": "Fixed"`,
			`properties.publicIPAllocationMethod: "Fixed" is not one of IPAllocationMethod's values ["Dynamic" "Static"]`},
		{`"access": "Deny",`, `"access": "Block",`, `properties.securityRules[2].properties.access: "Block" is not one of SecurityRuleAccess's values`},
		{`"storageAccountType": "StandardSSD_LRS"`, `"storageAccountType": "StandardSSD"`,
			`properties.storageProfile.osDisk.managedDisk.storageAccountType: "StandardSSD" is not one of StorageAccountTypes's values`},
		{`"principalType": "ServicePrincipal"`, `"principalType": "App"`, `properties.principalType: "App" is not one of PrincipalType's values`},
		// A required property missing.
		{`"softDeleteRetentionInDays": 7,
        "tenantId": "[subscription().tenantId]"`, `"softDeleteRetentionInDays": 7`, `properties.tenantId: required property of VaultProperties missing`},
		{`"direction": "Outbound",
              "priority": 100,`, `"priority": 100,`, `properties.securityRules[0].properties.direction: required property of SecurityRulePropertiesFormat missing`},
		// A read-only property set.
		{`"adminUserEnabled": false,`, `"adminUserEnabled": false, "loginServer": "acme.azurecr.io",`, `properties.loginServer: read-only property of RegistryProperties`},
		// Wrong JSON types.
		{`"diskSizeGB": 30,`, `"diskSizeGB": "30",`, `properties.storageProfile.osDisk.diskSizeGB: string "30", want an integer`},
		{`"priority": 100,`, `"priority": 100.5,`, `properties.securityRules[0].properties.priority: number 100.5, want an integer`},
		{`"enableSoftDelete": true,`, `"enableSoftDelete": "true",`, `properties.enableSoftDelete: string "true", want a boolean`},
		// A reference() at an api-version no module describes, or reading
		// a property the resource does not have.
		{`'` + apiIdentities + `').principalId`, `'2023-01-31').principalId`, `reference(Microsoft.ManagedIdentity/userAssignedIdentities, '2023-01-31'): type and api-version not described`},
		{`'` + apiRegistry + `').loginServer]`, `'` + apiRegistry + `').loginServr]`, `reference(Microsoft.ContainerRegistry/registries, '` + apiRegistry + `').loginServr: not a property of the resource`},
		// A type or api-version no module describes.
		{`"apiVersion": "` + apiRegistry + `",`, `"apiVersion": "2019-05-01",`, `Microsoft.ContainerRegistry/registries "[variables('registryName')]" (2019-05-01): api-version not described by the SDK modules, which have ` + apiRegistry},
		{`"type": "Microsoft.ContainerRegistry/registries"`, `"type": "Microsoft.ContainerRegistry/registry"`, `Microsoft.ContainerRegistry/registry "[variables('registryName')]" (` + apiRegistry + `): no SDK module describes this resource type`},
	} {
		bad := strings.Replace(string(tmpl), tc.from, tc.to, 1)
		if bad == string(tmpl) {
			t.Fatalf("%q is not in the template", tc.from)
		}
		problems, err := checkARMResources(sdk, []byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		refProblems, _, err := checkARMReferences(sdk, []byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		problems = append(problems, refProblems...)
		if len(problems) != 1 || !strings.Contains(problems[0], tc.want) {
			t.Errorf("%s → %s: want one problem with %q, got %q", tc.from, tc.to, tc.want, problems)
		}
	}
}
