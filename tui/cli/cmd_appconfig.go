package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"

	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// appValidateCommand checks an app config directory without a server.
func (a *app) appValidateCommand() *cobra.Command {
	var pluginSchemas []string
	cmd := &cobra.Command{
		Use:   "validate DIR [--plugin-schema FILE]...",
		Short: "Check an app config directory and list every problem in it",
		Long: `Check the app config in DIR (app.toml, inputs.toml, components/*.toml, ...)
without contacting imsd. Every problem is listed with its file, line and key.
Exits 1 when the config is not valid.

Component configs are checked against their type's schema: the built-in
types' schemas are known; for a third-party type, pass the output of its
plugin's describe with --plugin-schema FILE (repeatable), as registered in
imsd with "byoc plugin register". A config string holding a {{ }} reference
is rendered only at deploy time, so its type, format and bounds are not
checked.`,
		Args: exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, _, err := a.pluginSchemas(pluginSchemas)
			if err != nil {
				return err
			}
			app, err := load.Dir(args[0], opts)
			var cerr *diag.Error
			switch {
			case errors.As(err, &cerr):
				if a.jsonOutput() {
					if err := writeJSONValue(a.stdout, map[string]any{"valid": false, "diagnostics": cerr.Diagnostics}); err != nil {
						return err
					}
					return &exitCodeError{code: exitError}
				}
				return &exitCodeError{code: exitError, msg: cerr.Error()}
			case err != nil:
				return err
			}
			waves := app.Graph().Levels()
			if a.jsonOutput() {
				return writeJSONValue(a.stdout, map[string]any{"valid": true, "diagnostics": []any{}, "warnings": append([]diag.Diagnostic{}, app.Warnings...),
					"app": app.Metadata.Name, "components": len(app.Components), "actions": len(app.Actions), "installs": len(app.Installs), "deployWaves": waves})
			}
			for _, w := range app.Warnings {
				fmt.Fprintln(a.stderr, w.String())
			}
			fmt.Fprintf(a.stdout, "The app config in %s is valid.\n", args[0])
			f := newFields(a.stdout)
			f.add("App", app.Metadata.Name)
			if app.Metadata.Version != "" {
				f.add("Version", app.Metadata.Version)
			}
			f.add("Components", fmt.Sprint(len(app.Components)))
			f.add("Actions", fmt.Sprint(len(app.Actions)))
			f.add("Installs", fmt.Sprint(len(app.Installs)))
			if err := f.flush(); err != nil {
				return err
			}
			if len(waves) > 0 {
				fmt.Fprintln(a.stdout, "Deploy order (each line deploys in parallel):")
				for i, w := range waves {
					fmt.Fprintf(a.stdout, "  %d. %s\n", i+1, strings.Join(w, ", "))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&pluginSchemas, "plugin-schema", nil, "a third-party type's describe output (JSON), to check its components' config; repeatable")
	return cmd
}

// appInitCommand writes the commented example app.
func (a *app) appInitCommand() *cobra.Command {
	var cloud string
	cmd := &cobra.Command{
		Use:   "init DIR [--cloud aws|azure|gcp]",
		Short: "Write a commented example app config into DIR",
		Long: `Write a commented example app config into DIR. Without --cloud it installs
on every cloud byoc has an install stack for (app.toml clouds = ["aws",
"azure", "gcp"]), and permissions.toml gives each mode's AWS policies,
Azure roles and Google Cloud roles; --cloud aws, azure or gcp writes the
example for that cloud alone.`,
		Args: exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cloud != "" {
				if _, err := load.ExampleFilesFor(cloud); err != nil {
					return usagef("--cloud: %v", err)
				}
			}
			files, err := load.WriteExampleFor(args[0], cloud)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Wrote an example app to %s:\n", args[0])
			for _, f := range files {
				fmt.Fprintf(a.stdout, "  %s\n", f)
			}
			fmt.Fprintf(a.stdout, "Check it with: byoc app validate %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&cloud, "cloud", "", "write the example for one cloud: aws, azure or gcp (default: all three)")
	return cmd
}

// appPushCommand validates an app config and stores it as a revision.
func (a *app) appPushCommand() *cobra.Command {
	var noDeploy bool
	cmd := &cobra.Command{
		Use:   "push DIR",
		Short: "Validate an app config directory and store it as the app's next revision",
		Long: `Check the app config in DIR as "byoc app validate" does, then send every
file to imsd, which checks it again and stores it as the app's next
immutable revision (creating the app on its first push). Pushing files
identical to the latest revision creates nothing. The check here knows the
built-in types' schemas only; imsd checks third-party types' configs
against the schemas registered with "byoc plugin register".

Unless --no-deploy is given, imsd then applies installs/*.toml (creating
or changing those installs) and queues an update workflow for every
provisioned install of the app: each redeploys only the components whose
rendered config changed, and what is downstream of them.`,
		Args: exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.pluginSchemaTypes(nil)
			if err != nil {
				return err
			}
			// imsd knows the registered types; leave them to it.
			opts.AnyType = true
			cfg, err := load.Dir(args[0], opts)
			var cerr *diag.Error
			if errors.As(err, &cerr) {
				return &exitCodeError{code: exitError, msg: cerr.Error()}
			} else if err != nil {
				return err
			}
			// imsd checks again, knowing every registered type: its
			// warnings (with these) come back in the revision.
			c, err := a.connect()
			if err != nil {
				return err
			}
			req := &imsv1.PushAppRevisionRequest{NoDeploy: noDeploy}
			for _, p := range slices.Sorted(maps.Keys(cfg.Files)) {
				req.Files = append(req.Files, &imsv1.AppFile{Path: p, Content: cfg.Files[p]})
			}
			res, err := c.PushAppRevision(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			rev := res.Msg.GetRevision()
			for _, w := range rev.GetWarnings() {
				fmt.Fprintf(a.stderr, "warning: %s\n", w)
			}
			if !res.Msg.GetCreated() {
				fmt.Fprintf(a.stdout, "App %q is unchanged: revision %d has the same files.\n", res.Msg.GetApp().GetName(), rev.GetNumber())
			} else {
				fmt.Fprintf(a.stdout, "Pushed app %q revision %d (%s).\n", res.Msg.GetApp().GetName(), rev.GetNumber(), rev.GetDigest())
				printChanges(a.stdout, res.Msg.GetChanges())
			}
			a.printPushDeploys(c, res.Msg)
			return nil
		},
	}
	cmd.Flags().BoolVar(&noDeploy, "no-deploy", false, "store the revision only: leave installs and installs/*.toml alone")
	return cmd
}

func (a *app) appRevisionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revisions APP",
		Short: "List an app's revisions, newest first",
		Args:  exactArgs("APP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.ListAppRevisions(cmd.Context(), connect.NewRequest(&imsv1.ListAppRevisionsRequest{App: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			if err := sortRows(a, res.Msg.GetRevisions()); err != nil {
				return err
			}
			if a.jsonOutput() {
				return writeJSONList(a.stdout, res.Msg.GetRevisions())
			}
			t := newTable(a.stdout, "REVISION", "VERSION", "DIGEST", "PUSHED", "BY", "WARNINGS")
			for _, r := range res.Msg.GetRevisions() {
				t.row(fmt.Sprint(r.GetNumber()), r.GetVersion(), shortDigest(r.GetDigest()), ago(a.now(), r.GetCreateTime()), r.GetCreatedBy(), fmt.Sprint(len(r.GetWarnings())))
			}
			return t.flush()
		},
	}
}

func (a *app) appDiffCommand() *cobra.Command {
	var detailed, perInstall bool
	var selector string
	cmd := &cobra.Command{
		Use:   "diff APP REV1 [REV2] [--installs | -l SELECTOR]",
		Short: "Show what changed between two revisions of an app (REV2 defaults to the latest)",
		Long: `Show what changed between two revisions of an app: per component, action,
input, secret and install, each changed key with its old and new values
(a sensitive input's are masked), and which script and policy files changed.
REV2 defaults to the latest revision.

With --installs (or -l SELECTOR, for the installs it matches), also what
changes for each install: every component's config as the install gets
it (its installs/NAME.toml overrides merged over the app's), key by key,
old → new, and every input's value (a sensitive one masked).

With --detailed-exitcode the exit code says whether there were changes,
as terraform plan's does: 0 none, 2 some, 1 an error.`,
		Example: `  byoc app diff shop 3           # revision 3 against the latest
  byoc app diff shop 3 4 --detailed-exitcode || echo "changed or failed"
  byoc app diff shop 3 -l tier=canary   # and what changes for each canary install`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || len(args) > 3 {
				return usagef("want APP REV1 [REV2], got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var nums [2]int64
			for i, s := range args[1:] {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil || n <= 0 {
					return usagef("revision %q is not a revision number", s)
				}
				nums[i] = n
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.DiffAppRevisions(cmd.Context(), connect.NewRequest(&imsv1.DiffAppRevisionsRequest{
				App: args[0], From: nums[0], To: nums[1], Installs: perInstall, Selector: selector}))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
			}
			installs := perInstall || selector != ""
			if a.jsonOutput() {
				var err error
				if installs {
					err = writeJSON(a.stdout, res.Msg)
				} else {
					err = writeJSONList(a.stdout, res.Msg.GetChanges())
				}
				if err != nil || !detailed || len(res.Msg.GetChanges()) == 0 {
					return err
				}
				return &exitCodeError{code: exitChanges}
			}
			if len(res.Msg.GetChanges()) == 0 {
				fmt.Fprintln(a.stdout, "No changes.")
			} else {
				printChanges(a.stdout, res.Msg.GetChanges())
			}
			if installs {
				fmt.Fprintf(a.stdout, "\nPer install: %d changed, %d unchanged.\n", len(res.Msg.GetInstalls()), res.Msg.GetUnchangedInstalls())
				for _, in := range res.Msg.GetInstalls() {
					fmt.Fprintf(a.stdout, "install %s:\n", in.GetInstall())
					printChanges(a.stdout, in.GetChanges())
				}
			}
			if len(res.Msg.GetChanges()) == 0 {
				return nil
			}
			if detailed {
				return &exitCodeError{code: exitChanges}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "exit 0 when the revisions are the same, 2 when they differ, 1 on an error")
	cmd.Flags().BoolVar(&perInstall, "installs", false, "also show what changes for each install (config per component with its overrides, inputs)")
	selectorFlag(cmd, &selector, "installs (implies --installs)")
	return cmd
}

// printChanges prints what changed, and under each changed part its keys'
// old and new values: "      config.size: "small" → "large"".
func printChanges(w io.Writer, cs []*imsv1.ConfigChange) {
	sign := map[string]string{"added": "+", "removed": "-", "changed": "~"}
	for _, c := range cs {
		line := fmt.Sprintf("  %s %s %s", sign[c.GetOp()], c.GetKind(), c.GetName())
		if len(c.GetFields()) > 0 {
			line += ": " + strings.Join(c.GetFields(), ", ")
		}
		fmt.Fprintln(w, line)
		for _, v := range c.GetValues() {
			fmt.Fprintf(w, "      %s: %s → %s\n", v.GetField(), changedValue(v.GetOld()), changedValue(v.GetNew()))
		}
	}
}

// changedValue is a value of a FieldChange (JSON) for a person: "(none)"
// where the key is absent, a sensitive one's mask bare, long ones cut.
func changedValue(js string) string {
	switch js {
	case "", "null":
		return "(none)"
	case `"` + sensitiveMask + `"`:
		return sensitiveMask
	}
	js = termtext.Clean(js, " ")
	if r := []rune(js); len(r) > 60 {
		return string(r[:59]) + "…"
	}
	return js
}

// sensitiveMask is what imsd sends for a sensitive input's value.
const sensitiveMask = "(sensitive)"

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}
