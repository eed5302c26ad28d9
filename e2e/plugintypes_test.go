package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// greetingDescribe is what a third-party plugin's describe prints.
const greetingDescribe = `{
  "type": "greeting",
  "version": "0.1.0",
  "protocol": "1.1",
  "protocol_versions": ["1.1"],
  "capabilities": ["destroy"],
  "config_schema": {
    "type": "object",
    "required": ["name"],
    "additionalProperties": false,
    "properties": {"name": {"type": "string", "minLength": 1}, "replicas": {"type": "integer", "minimum": 1}}
  }
}`

func push(ctx context.Context, c imsv1connect.OperatorServiceClient, files map[string]string) (*imsv1.PushAppRevisionResponse, error) {
	req := &imsv1.PushAppRevisionRequest{}
	for p, content := range files {
		req.Files = append(req.Files, &imsv1.AppFile{Path: p, Content: []byte(content)})
	}
	res, err := c.PushAppRevision(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// diagnostics returns the ConfigDiagnostics of a refused push, as printed.
func diagnostics(t *testing.T, err error) []string {
	t.Helper()
	var ce *connect.Error
	if err == nil || !strings.Contains(err.Error(), "app config") || !errors.As(err, &ce) {
		t.Fatalf("push error %v, want config diagnostics", err)
	}
	var out []string
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatal(err)
		}
		if cd, ok := v.(*imsv1.ConfigDiagnostics); ok {
			for _, x := range cd.Diagnostics {
				s := fmt.Sprintf("%s:%d: %s: %s", x.File, x.Line, x.Key, x.Message)
				if x.Hint != "" {
					s += " (" + x.Hint + ")"
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// The type registry through the operator API: admins register, replace
// and remove; viewers read; built-in names and broken schemas are refused;
// pushes check configs against registered schemas, and stored revisions
// stay readable after their type is removed.
func TestPluginTypeRegistry(t *testing.T) {
	ctx := context.Background()
	ims := cluster.StartIMS(t, fast)
	admin := ims.Admin()
	tok, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "support", Role: imsv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}
	viewer := ims.Client(tok.Msg.Token)
	register := func(c imsv1connect.OperatorServiceClient, desc string) (*imsv1.RegisterPluginTypeResponse, error) {
		res, err := c.RegisterPluginType(ctx, connect.NewRequest(&imsv1.RegisterPluginTypeRequest{Description: desc}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}

	_, err = register(viewer, greetingDescribe)
	wantCode(t, err, connect.CodePermissionDenied, "admin")
	r, err := register(admin, greetingDescribe)
	if err != nil {
		t.Fatal(err)
	}
	if p := r.PluginType; p.Type != "greeting" || p.Version != "0.1.0" || p.RegisteredBy == "" || p.ConfigSchema == nil || r.Replaced != nil {
		t.Fatalf("register = %v", r)
	}
	r, err = register(admin, strings.Replace(greetingDescribe, `"0.1.0"`, `"0.2.0"`, 1))
	if err != nil || r.Replaced.GetVersion() != "0.1.0" {
		t.Fatalf("second register = %v, %v; want it to replace 0.1.0", r, err)
	}

	_, err = register(admin, strings.Replace(greetingDescribe, `"greeting"`, `"action"`, 1))
	wantCode(t, err, connect.CodeInvalidArgument, `"action" is a built-in type`)
	_, err = register(admin, strings.Replace(greetingDescribe, `"minLength": 1`, `"minLength": 1, "format": "x", "if": {}`, 1))
	wantCode(t, err, connect.CodeInvalidArgument, `config_schema: schema at /properties/name: keyword "if" is not supported`)
	_, err = register(admin, "")
	wantCode(t, err, connect.CodeInvalidArgument, "description")
	_, err = register(admin, strings.ReplaceAll(greetingDescribe, `"1.1"`, `"2.0"`))
	wantCode(t, err, connect.CodeInvalidArgument, "protocol: the plugin speaks byoc plugin protocol 2.0, but agents speak 1.x: no agent could run it")

	list, err := viewer.ListPluginTypes(ctx, connect.NewRequest(&imsv1.ListPluginTypesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Msg.PluginTypes {
		names = append(names, p.Type)
		if p.ConfigSchema != nil {
			t.Errorf("list carries the schema of %s", p.Type)
		}
	}
	if strings.Join(names, ",") != "action,helm,image,terraform,greeting" {
		t.Fatalf("list = %v", names)
	}
	got, err := viewer.GetPluginType(ctx, connect.NewRequest(&imsv1.GetPluginTypeRequest{Type: "greeting"}))
	if err != nil || got.Msg.PluginType.Version != "0.2.0" || got.Msg.PluginType.ConfigSchema.GetStructValue().GetFields()["required"] == nil {
		t.Fatalf("get greeting = %v, %v", got, err)
	}
	got, err = viewer.GetPluginType(ctx, connect.NewRequest(&imsv1.GetPluginTypeRequest{Type: "action"}))
	if err != nil || !got.Msg.PluginType.Builtin || got.Msg.PluginType.ConfigSchema == nil {
		t.Fatalf("get action = %v, %v", got, err)
	}
	_, err = viewer.GetPluginType(ctx, connect.NewRequest(&imsv1.GetPluginTypeRequest{Type: "nope"}))
	wantCode(t, err, connect.CodeNotFound, `"nope" is not registered`)

	app := map[string]string{"app.toml": "name = \"shop\"\n", "inputs.toml": "[[input]]\nname = \"n\"\ntype = \"number\"\ndefault = 2\n"}
	with := func(files map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range []map[string]string{app, files} {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	_, err = push(ctx, admin, with(map[string]string{
		"components/hello.toml": "type = \"greeting\"\n[config]\nname = \"\"\nreplicas = \"2\"\nnme = \"x\"\n",
		"components/job.toml":   "type = \"action\"\nconfig.steps = [{ scrpt = \"x\" }]\n",
		"components/typo.toml":  "type = \"greting\"\n",
	}))
	want := []string{
		`components/hello.toml:3: config.name: must not be empty`,
		`components/hello.toml:4: config.replicas: got string, want integer`,
		`components/hello.toml:5: config.nme: unknown field (did you mean "name"?)`,
		`components/job.toml:2: config.steps[0].scrpt: unknown field (did you mean "script"?)`,
		`components/typo.toml:1: type: no component type "greting" (did you mean "greeting"? known types: action, greeting, helm, image, terraform; register a third-party type with: byoc-plugin-TYPE describe | byoc plugin register -)`,
	}
	if d := diagnostics(t, err); strings.Join(d, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diagnostics:\n%s\nwant:\n%s", strings.Join(d, "\n"), strings.Join(want, "\n"))
	}
	good := with(map[string]string{"components/hello.toml": "type = \"greeting\"\n[config]\nname = \"ada\"\nreplicas = \"{{ .inputs.n }}\"\n"})
	if _, err := push(ctx, admin, good); err != nil {
		t.Fatalf("good push: %v", err)
	}

	_, err = viewer.RemovePluginType(ctx, connect.NewRequest(&imsv1.RemovePluginTypeRequest{Type: "greeting"}))
	wantCode(t, err, connect.CodePermissionDenied, "admin")
	_, err = admin.RemovePluginType(ctx, connect.NewRequest(&imsv1.RemovePluginTypeRequest{Type: "action"}))
	wantCode(t, err, connect.CodeInvalidArgument, "built-in")
	if _, err := admin.RemovePluginType(ctx, connect.NewRequest(&imsv1.RemovePluginTypeRequest{Type: "greeting"})); err != nil {
		t.Fatal(err)
	}
	_, err = admin.RemovePluginType(ctx, connect.NewRequest(&imsv1.RemovePluginTypeRequest{Type: "greeting"}))
	wantCode(t, err, connect.CodeNotFound, "not registered")
	// A push using the removed type is refused; the stored revision is
	// still read (a diff against a new revision works).
	changed := with(map[string]string{"components/hello.toml": strings.Replace(good["components/hello.toml"], "ada", "bob", 1)})
	_, err = push(ctx, admin, changed)
	wantCode(t, err, connect.CodeInvalidArgument, `no component type "greeting"`)
	second := with(map[string]string{"components/web.toml": "type = \"image\"\n[config]\nsource = \"web@sha256:" + strings.Repeat("ab", 32) + "\"\n"})
	res, err := push(ctx, admin, second)
	if err != nil || res.Revision.Number != 2 || len(res.Changes) == 0 {
		t.Fatalf("push after remove = %v, %v", res, err)
	}
}

// The plugin registry with the real binaries: the example plugin's
// describe output is registered with byoc plugin register, a push with a
// bad field of its type is refused naming the component file and field,
// and a good one is stored.
func TestPluginRegisterAndPush(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	run := cli.Run

	// The example plugin is a module of its own: build it, as its author
	// would, and take what its describe prints.
	bin := filepath.Join(t.TempDir(), "byoc-plugin-localfile")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(cluster.RepoRoot(), "plugins", "examples", "localfile")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example plugin: %v\n%s", err, out)
	}
	describe, err := exec.Command(bin, "describe").Output()
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	// Registered from stdin, as in the docs: describe | byoc plugin register -.
	reg := cli.Cmd("plugin", "register", "-")
	reg.Stdin = bytes.NewReader(describe)
	if out, err := reg.CombinedOutput(); err != nil || !strings.Contains(string(out), `Registered component type "localfile" version 0.1.0 (protocol 1.4).`) {
		t.Fatalf("register: %v\n%s", err, out)
	}
	if out := run(0, "plugin", "list"); !strings.Contains(out, "localfile") || !strings.Contains(out, "destroy,drift,plan_destroy,outputs_schema") || !strings.Contains(out, "action") {
		t.Fatalf("plugin list:\n%s", out)
	}
	if out := run(0, "plugin", "get", "localfile", "-o", "json"); !strings.Contains(out, `"pattern": "^/"`) {
		t.Fatalf("plugin get:\n%s", out)
	}

	dir := t.TempDir()
	write := func(p, content string) { cluster.WriteApp(t, dir, map[string]string{p: content}) }
	write("app.toml", "name = \"notes\"\n")
	write("components/motd.toml", "type = \"localfile\"\n\n[config]\npath = \"etc/motd\"\ncontent = \"hello\"\nmod = \"0644\"\nowner = \"root\"\n")
	out := run(1, "app", "push", dir)
	for _, want := range []string{
		`components/motd.toml:4: config.path: is not in the required form (absolute path of the file) (must match the regular expression ^/)`,
		`components/motd.toml:6: config.mod: unknown field (did you mean "mode"?)`,
		// issue 29 item 9: a stale registration is the usual cause.
		`components/motd.toml:7: config.owner: unknown field (known fields: `,
		`config: type localfile is registered as version 0.1.0 (`,
		`whose schema has no such field; if the plugin has it now, that registration is stale (register the new version: byoc-plugin-localfile describe | byoc plugin register -)`,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("bad push, want %q in:\n%s", want, out)
		}
	}
	// byoc app validate checks it offline given the same describe output.
	schema := filepath.Join(t.TempDir(), "localfile.json")
	os.WriteFile(schema, describe, 0o644)
	if out := run(1, "app", "validate", dir); !strings.Contains(out, `no component type "localfile"`) || !strings.Contains(out, "--plugin-schema") {
		t.Fatalf("validate without the schema:\n%s", out)
	}
	if out := run(1, "app", "validate", "--plugin-schema", schema, dir); !strings.Contains(out, `components/motd.toml:4: config.path: is not in the required form (absolute path of the file) (must match the regular expression ^/)`) {
		t.Fatalf("validate with the schema:\n%s", out)
	}

	write("components/motd.toml", "type = \"localfile\"\n\n[config]\npath = \"/etc/motd\"\ncontent = \"hello from {{ .install.name }}\"\nmode = \"0644\"\n")
	run(0, "app", "validate", "--plugin-schema", schema, dir)
	if out := run(0, "app", "push", dir); !strings.Contains(out, `Pushed app "notes" revision 1`) {
		t.Fatalf("good push:\n%s", out)
	}
	run(0, "plugin", "remove", "localfile")
	if out := run(0, "plugin", "list", "-o", "json"); strings.Contains(out, "localfile") {
		t.Fatalf("list after remove:\n%s", out)
	}
}

// A type registered before reserved config keys were refused, whose
// schema declares one, fails every push that uses it, saying why and how
// to fix it (issue 29 item 1: the agent took the key out silently).
func TestRegisteredReservedKeyRefusedAtPush(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	st, err := store.Open(ctx, filepath.Join(ims.DataDir, "imsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, _, err := st.PutPluginType(ctx, store.PluginType{Type: "old", Version: "0.9", Description: "{}", RegisteredAt: time.Now(),
		ConfigSchema: `{"type":"object","properties":{"sensitive":{"type":"boolean"}}}`}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cluster.WriteApp(t, dir, map[string]string{"app.toml": "name = \"notes\"\n", "components/c.toml": "type = \"old\"\n[config]\nsensitive = true\n"})
	out := cli.Run(1, "app", "push", dir)
	for _, want := range []string{`type old is registered (version 0.9) with a config schema that properties: "sensitive" is a reserved config key`,
		"fix the plugin and register it again: byoc-plugin-old describe | byoc plugin register -"} {
		if !strings.Contains(out, want) {
			t.Fatalf("push lacks %q:\n%s", want, out)
		}
	}
}

// A field the registered type's schema marks deprecated is a warning of
// imsd's check at push: the push succeeds, says it, and the revision
// keeps it for app revisions and the console (issue 29: warnings as a
// diagnostic severity; the CLI's own check at push knows no registered
// type, so only imsd can find it).
func TestPushWarnsOfDeprecatedFields(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	describe := strings.Replace(greetingDescribe, `"replicas": {"type": "integer", "minimum": 1}`,
		`"replicas": {"type": "integer", "minimum": 1}, "size": {"type": "integer", "deprecated": true, "description": "set replicas instead"}`, 1)
	reg := cli.Cmd("plugin", "register", "-")
	reg.Stdin = strings.NewReader(describe)
	if out, err := reg.CombinedOutput(); err != nil {
		t.Fatalf("register: %v\n%s", err, out)
	}
	dir := t.TempDir()
	cluster.WriteApp(t, dir, map[string]string{
		"app.toml":           "name = \"hello\"\n",
		"components/hi.toml": "type = \"greeting\"\n\n[config]\nname = \"x\"\nsize = 3\n",
		"components/ok.toml": "type = \"greeting\"\n\n[config]\nname = \"y\"\n",
	})
	const want = "components/hi.toml:5: config.size: is deprecated (set replicas instead)"
	out := cli.Run(0, "app", "push", "--no-deploy", dir)
	if !strings.Contains(out, "warning: "+want) || !strings.Contains(out, `Pushed app "hello" revision 1`) {
		t.Fatalf("push:\n%s", out)
	}
	if strings.Count(out, "warning: ") != 1 {
		t.Fatalf("push warned of more than the deprecated field:\n%s", out)
	}
	if out := cli.Run(0, "app", "revisions", "hello"); !regexp.MustCompile(`(?m)^1 .* 1\s*$`).MatchString(out) {
		t.Fatalf("app revisions shows no warning count:\n%s", out)
	}
	res, err := ims.Admin().ListAppRevisions(context.Background(), connect.NewRequest(&imsv1.ListAppRevisionsRequest{App: "hello"}))
	if err != nil {
		t.Fatal(err)
	}
	if w := res.Msg.Revisions[0].Warnings; len(w) != 1 || w[0] != want {
		t.Fatalf("stored warnings = %q, want [%q]", w, want)
	}
}
