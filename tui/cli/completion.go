package cli

import (
	"context"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Shell completion of resource names asks the server, as gh and kubectl
// do: the installs, apps, jobs and actions that exist now, each with a
// short description, never file names. A server that does not answer in
// completeTimeout completes nothing rather than hang the shell.

const completeTimeout = 3 * time.Second

// resource is what a positional argument or a flag names.
type resource int

const (
	noResource resource = iota
	installRes
	appRes
	jobRes
	actionRes // of the install named by the first argument
)

// argResources are the commands whose NAME argument names an existing
// resource (elsewhere NAME is a new one's name, as in install create).
var argResources = map[string]resource{
	"byoc install get":   installRes,
	"byoc install token": installRes,
	"byoc app get":       appRes,
}

// placeholders map the argument placeholders of a command's Use line to
// what they name.
var placeholders = map[string]resource{
	"INSTALL": installRes, "INSTALL...": installRes, "APP": appRes, "JOB": jobRes, "ACTION": actionRes,
}

// flagResources are the flags that name a resource, on any command.
var flagResources = map[string]resource{"install": installRes, "app": appRes}

// addCompletions gives cmd and its descendants server-side completion of
// their resource arguments (from their Use line) and flags.
func (a *app) addCompletions(cmd *cobra.Command) {
	if cmd.ValidArgsFunction == nil && cmd.Runnable() && cmd.HasParent() {
		if kinds, variadic := argKinds(cmd); len(kinds) > 0 {
			cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				i := len(args)
				if i >= len(kinds) {
					if !variadic {
						return nil, cobra.ShellCompDirectiveNoFileComp
					}
					i = len(kinds) - 1
				}
				return a.complete(cmd, kinds[i], args, toComplete)
			}
		} else if !strings.Contains(cmd.Use, "DIR") && !strings.Contains(cmd.Use, "FILE") {
			// A new resource's name, a type, a revision: no file names.
			cmd.ValidArgsFunction = cobra.NoFileCompletions
		}
	}
	for name, kind := range flagResources {
		if cmd.LocalNonPersistentFlags().Lookup(name) != nil {
			_ = cmd.RegisterFlagCompletionFunc(name, func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return a.complete(cmd, kind, args, toComplete)
			})
		}
	}
	for _, sub := range cmd.Commands() {
		a.addCompletions(sub)
	}
}

// argKinds reads what each positional argument of cmd names from its Use
// line ("run INSTALL ACTION [--wait] | ..." is INSTALL, ACTION), and
// whether the last one repeats ("INSTALL...").
func argKinds(cmd *cobra.Command) (kinds []resource, variadic bool) {
	if k, ok := argResources[cmd.CommandPath()]; ok {
		return []resource{k}, false
	}
	use, _, _ := strings.Cut(cmd.Use, "|")
	found := false
	for _, w := range strings.Fields(use)[1:] {
		if strings.HasPrefix(w, "[") || strings.HasPrefix(w, "-") {
			break
		}
		kinds = append(kinds, placeholders[w])
		variadic = strings.HasSuffix(w, "...")
		found = found || placeholders[w] != noResource
	}
	if !found {
		return nil, false
	}
	return kinds, variadic
}

// complete lists the resources of kind whose names start with toComplete,
// as "name<TAB>description".
func (a *app) complete(cmd *cobra.Command, kind resource, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const dir = cobra.ShellCompDirectiveNoFileComp
	if kind == noResource {
		return nil, dir
	}
	c, err := a.connect()
	if err != nil {
		return nil, dir
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	var out []cobra.Completion
	add := func(name string, desc ...string) {
		if strings.HasPrefix(name, toComplete) {
			out = append(out, cobra.CompletionWithDesc(name, strings.Join(desc, " ")))
		}
	}
	switch kind {
	case installRes:
		res, err := c.ListInstalls(ctx, connect.NewRequest(&imsv1.ListInstallsRequest{}))
		if err != nil {
			return nil, dir
		}
		for _, ins := range res.Msg.GetInstalls() {
			add(ins.GetName(), ins.GetState())
		}
	case appRes:
		res, err := c.ListApps(ctx, connect.NewRequest(&imsv1.ListAppsRequest{}))
		if err != nil {
			return nil, dir
		}
		for _, ap := range res.Msg.GetApps() {
			add(ap.GetName(), ap.GetDescription())
		}
	case jobRes:
		res, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{PageSize: 100}))
		if err != nil {
			return nil, dir
		}
		for _, j := range res.Msg.GetJobs() {
			add(j.GetId(), j.GetComponentType(), j.GetOperation(), stateName(j.GetState()))
		}
	case actionRes:
		if len(args) == 0 {
			return nil, dir
		}
		res, err := c.ListActions(ctx, connect.NewRequest(&imsv1.ListActionsRequest{Install: args[0]}))
		if err != nil {
			return nil, dir
		}
		for _, ac := range res.Msg.GetActions() {
			add(ac.GetName(), ac.GetDescription())
		}
	}
	return out, dir
}
