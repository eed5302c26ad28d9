package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/typeschema"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

func (a *app) pluginCommand() *cobra.Command {
	return group("plugin", "Register third-party component types and show the types pushes accept",
		a.pluginPublishCommand(),
		a.pluginRegisterCommand(),
		a.pluginListCommand(),
		a.pluginGetCommand(),
		a.pluginRemoveCommand(),
	)
}

// maxDescribeBytes caps a describe file read by the CLI.
const maxDescribeBytes = 1 << 20

// readDescribe reads the output of byoc-plugin-TYPE describe from a file,
// or from stdin for "-".
func (a *app) readDescribe(name string) ([]byte, error) {
	var r io.Reader = a.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxDescribeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxDescribeBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; is it the output of byoc-plugin-TYPE describe?", name, maxDescribeBytes)
	}
	return b, nil
}

func (a *app) pluginRegisterCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "register FILE|oci://REF",
		Short: "Register a third-party component type from its plugin's describe output (FILE, - for stdin, or a published release)",
		Long: `Register the component type a plugin serves, so that imsd checks the config
of that type's components against the plugin's config schema when an app is
pushed. FILE holds what the plugin prints when run as
"byoc-plugin-TYPE describe"; with -, it is read from stdin:

  byoc-plugin-greeting describe | byoc plugin register -

or, for a release published with byoc plugin publish, its reference by
digest: the describe output is read from the release (checked against its
digest), with the vendor registry's credentials from
$BYOC_VENDOR_REGISTRY_USERNAME and _PASSWORD, or _TOKEN:

  byoc plugin register oci://127.0.0.1:5000/plugins/greeting@sha256:...

Registering a type again replaces its earlier registration (imsd keeps the
latest description). A schema the byoc SDK cannot check, or the name of a
built-in type, is refused. Needs an admin token.`,
		Args: exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var b []byte
			var err error
			from := ""
			if strings.HasPrefix(args[0], "oci:") {
				var m *plugindist.Manifest
				if b, m, err = a.readReleaseDescribe(cmd.Context(), args[0]); err != nil {
					return err
				}
				from = fmt.Sprintf(" from release %s", m.Descriptor.Digest)
			} else if b, err = a.readDescribe(args[0]); err != nil {
				return err
			}
			// The same check as imsd's, to fail before connecting.
			d, _, err := typeschema.ParseDescription(b)
			if err == nil {
				err = typeschema.CheckProtocol(d)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.RegisterPluginType(cmd.Context(), connect.NewRequest(&imsv1.RegisterPluginTypeRequest{Description: string(b)}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			msg := fmt.Sprintf("Registered component type %q version %s (protocol %s)%s", d.Type, d.Version, d.Protocol, from)
			if r := res.Msg.GetReplaced(); r != nil {
				msg += fmt.Sprintf(", replacing version %s", r.GetVersion())
			}
			fmt.Fprintln(a.stdout, msg+".")
			if len(d.ConfigSchema) == 0 {
				fmt.Fprintln(a.stdout, "The type declares no config schema: pushes accept any config for it.")
			}
			return nil
		},
	}
}

func (a *app) pluginListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the component types pushes accept: built-in, then registered",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.ListPluginTypes(cmd.Context(), connect.NewRequest(&imsv1.ListPluginTypesRequest{}))
			if err != nil {
				return c.wrap(err)
			}
			if err := sortRows(a, res.Msg.GetPluginTypes()); err != nil {
				return err
			}
			if a.jsonOutput() {
				return writeJSONList(a.stdout, res.Msg.GetPluginTypes())
			}
			t := newTable(a.stdout, "TYPE", "VERSION", "PROTOCOL", "CAPABILITIES", "REGISTERED", "BY")
			for _, p := range res.Msg.GetPluginTypes() {
				if p.GetBuiltin() {
					t.row(p.GetType(), "built-in", "", "", "", "")
					continue
				}
				t.row(p.GetType(), p.GetVersion(), p.GetProtocol(), strings.Join(p.GetCapabilities(), ","), ago(a.now(), p.GetRegisterTime()), p.GetRegisteredBy())
			}
			return t.flush()
		},
	}
}

func (a *app) pluginGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get TYPE",
		Short: "Show a component type with its config schema",
		Args:  exactArgs("TYPE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.GetPluginType(cmd.Context(), connect.NewRequest(&imsv1.GetPluginTypeRequest{Type: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			p := res.Msg.GetPluginType()
			if a.jsonOutput() {
				return writeJSON(a.stdout, p)
			}
			f := newFields(a.stdout)
			f.add("Type", p.GetType())
			if p.GetBuiltin() {
				f.add("Version", "built-in (comes with every agent)")
			} else {
				f.add("Version", p.GetVersion())
				f.add("Protocol", p.GetProtocol())
				f.add("Capabilities", strings.Join(p.GetCapabilities(), ", "))
				f.add("Registered", when(a.now(), p.GetRegisterTime()))
				f.add("Registered by", p.GetRegisteredBy())
			}
			if p.GetConfigSchema() == nil {
				f.add("Config schema", "none: any config is accepted")
			}
			if err := f.flush(); err != nil {
				return err
			}
			for _, s := range []struct {
				name string
				v    *structpb.Value
			}{{"Config schema", p.GetConfigSchema()}, {"Outputs schema", p.GetOutputsSchema()}} {
				if s.v == nil {
					continue
				}
				b, err := protojson.Marshal(s.v)
				if err != nil {
					return fmt.Errorf("encode json: %w", err)
				}
				fmt.Fprintf(a.stdout, "%s:\n", s.name)
				if err := writeIndented(a.stdout, b); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (a *app) pluginRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove TYPE",
		Short: "Remove a registered component type (pushes using it are then refused)",
		Args:  exactArgs("TYPE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			if _, err := c.RemovePluginType(cmd.Context(), connect.NewRequest(&imsv1.RemovePluginTypeRequest{Type: args[0]})); err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSONValue(a.stdout, map[string]any{"removed": args[0]})
			}
			fmt.Fprintf(a.stdout, "Removed component type %q. Existing revisions keep it; new pushes using it are refused.\n", args[0])
			return nil
		},
	}
}

// pluginSchemaTypes returns validator options for an offline check: the
// built-in types and the types of the given describe files.
func (a *app) pluginSchemaTypes(files []string) (validate.Options, error) {
	opts, _, err := a.pluginSchemas(files)
	return opts, err
}

// pluginSchemas is pluginSchemaTypes that also returns the third-party
// types' compiled schemas, by type.
func (a *app) pluginSchemas(files []string) (validate.Options, map[string]*configschema.Schema, error) {
	registered := map[string]*configschema.Schema{}
	for _, name := range files {
		b, err := a.readDescribe(name)
		if err != nil {
			return validate.Options{}, nil, err
		}
		d, s, err := typeschema.ParseDescription(b)
		if err != nil {
			return validate.Options{}, nil, usagef("--plugin-schema %s: %v", name, err)
		}
		if typeschema.IsBuiltin(d.Type) {
			return validate.Options{}, nil, usagef("--plugin-schema %s: %q is a built-in type; its schema is known already", name, d.Type)
		}
		registered[d.Type] = s
	}
	return validate.Options{
		Types:    typeschema.Types(registered),
		TypeHint: "pass a third-party type's describe output with --plugin-schema FILE",
	}, registered, nil
}
