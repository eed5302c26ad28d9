package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/schema/appconfig"
)

// appValidateCommand checks an app config directory without a server.
func (a *app) appValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate DIR",
		Short: "Check an app config directory and list every problem in it",
		Long: `Check the app config in DIR (app.toml, inputs.toml, components/*.toml, ...)
without contacting imsd. Every problem is listed with its file, line and key.
Exits 1 when the config is not valid.`,
		Args: exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			app, err := appconfig.LoadDir(args[0], appconfig.Options{})
			var cerr *appconfig.Error
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
				return writeJSONValue(a.stdout, map[string]any{"valid": true, "diagnostics": []any{}, "app": app.Metadata.Name,
					"components": len(app.Components), "actions": len(app.Actions), "installs": len(app.Installs), "deploy_waves": waves})
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
}

// appInitCommand writes the commented example app.
func (a *app) appInitCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "init DIR",
		Short: "Write a commented example app config into DIR",
		Args:  exactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := appconfig.WriteExample(args[0])
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
}
