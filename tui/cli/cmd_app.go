package cli

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) appCommand() *cobra.Command {
	return group("app", "Create, validate, push and inspect apps",
		a.appCreateCommand(),
		a.appListCommand(),
		a.appGetCommand(),
		a.appValidateCommand(),
		a.appInitCommand(),
		a.appPushCommand(),
		a.appRevisionsCommand(),
		a.appDiffCommand(),
	)
}

func (a *app) appCreateCommand() *cobra.Command {
	var description string
	cmd := &cobra.Command{
		Use:   "create NAME [--description D]",
		Short: "Create an app",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CreateApp(cmd.Context(), connect.NewRequest(&imsv1.CreateAppRequest{
				Name:        args[0],
				Description: description,
			}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg.GetApp())
			}
			fmt.Fprintf(a.stdout, "Created app %q (id %s).\n", res.Msg.GetApp().GetName(), res.Msg.GetApp().GetId())
			return nil
		},
	}
	cmd.Flags().StringVar(&description, "description", "", "what the app is")
	return cmd
}

func (a *app) appListCommand() *cobra.Command {
	var watch, all bool
	cmd := &cobra.Command{
		Use:     "list [--all] [--watch]",
		Aliases: []string{"ls"},
		Short:   "List apps",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			return runList(cmd.Context(), a, watch, listing[*imsv1.App]{
				noun: "apps", empty: "No apps; create one with: byoc app create NAME",
				fetch: func(ctx context.Context) ([]*imsv1.App, error) {
					res, err := c.ListApps(ctx, connect.NewRequest(&imsv1.ListAppsRequest{IncludeVendor: all}))
					if err != nil {
						return nil, c.wrap(err)
					}
					return res.Msg.GetApps(), nil
				},
				id:     (*imsv1.App).GetId,
				header: []string{"NAME", "ID", "CREATED", "DESCRIPTION"},
				row: func(_ context.Context, now time.Time, app *imsv1.App) []string {
					return []string{app.GetName(), app.GetId(), ago(now, app.GetCreateTime()), app.GetDescription()}
				},
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also list the vendor's build agent's reserved app (_vendor), left out otherwise")
	watchFlag(cmd, &watch, "each app again as it changes (new apps too)")
	return cmd
}

func (a *app) appGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show an app (by name or id)",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.GetApp(cmd.Context(), connect.NewRequest(&imsv1.GetAppRequest{IdOrName: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			app := res.Msg.GetApp()
			if a.jsonOutput() {
				return writeJSON(a.stdout, app)
			}
			f := newFields(a.stdout)
			f.add("Name", app.GetName())
			f.add("ID", app.GetId())
			f.add("Description", app.GetDescription())
			f.add("Created", when(a.now(), app.GetCreateTime()))
			return f.flush()
		},
	}
}
