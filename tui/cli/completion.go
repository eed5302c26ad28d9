package cli

import (
	"cmp"
	"context"
	"strconv"
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
	actionRes   // of the install named by the first argument
	workflowRes // workflow ids, newest first
	stepRes     // the steps of the workflow named by the first argument
	revisionRes // revisions of the app named by the first argument (or --app), or of the install's app
	roleRes     // break-glass roles of the install named by the first argument
	contextRes  // contexts of the config file (no server asked)
	releaseRes  // release ids, newest first
	tokenRes    // API token names
	pluginRes   // registered component types
)

// argResources are the commands whose NAME argument names an existing
// resource (elsewhere NAME is a new one's name, as in install create).
var argResources = map[string]resource{
	"byoc install get":    installRes,
	"byoc install token":  installRes,
	"byoc app get":        appRes,
	"byoc context use":    contextRes,
	"byoc context remove": contextRes,
	"byoc install label":  installRes,
	"byoc token revoke":   tokenRes,
	"byoc plugin get":     pluginRes,
	"byoc plugin remove":  pluginRes,
}

// placeholders map the argument placeholders of a command's Use line to
// what they name.
var placeholders = map[string]resource{
	"INSTALL": installRes, "INSTALL...": installRes, "APP": appRes, "JOB": jobRes, "ACTION": actionRes,
	"WORKFLOW": workflowRes, "STEP": stepRes, "REV1": revisionRes, "RELEASE": releaseRes, "WORKFLOW|INSTALL": workflowRes,
}

// flagResources are the flags that name a resource, on any command.
var flagResources = map[string]resource{
	"install": installRes, "app": appRes, "revision": revisionRes, "role": roleRes, "action": actionRes,
}

// flagValues are the flags whose values are a fixed list, by command path
// ("" for every command).
var flagValues = map[string]map[string][]string{
	"":                    {"output": {"text", "wide", "json", "yaml", "name", "jsonpath=", "jsonpath-file=", "go-template=", "go-template-file="}},
	"byoc job list":       {"state": {"queued", "assigned", "running", "succeeded", "failed", "cancelled", "timed_out", "refused"}},
	"byoc action run":     {"mode": {"provision", "maintenance", "deprovision", "break_glass"}},
	"byoc install plan":   {"kind": {"update", "provision", "deprovision"}},
	"byoc build package":  {"kind": {"helm", "terraform"}},
	"byoc install stack":  {"format": {"cloudformation", "azure", "gcp", "local"}},
	"byoc app init":       {"cloud": {"aws", "azure", "gcp"}},
	"byoc install update": {"require-approval": {"true", "false"}},
}

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
	path := cmd.CommandPath()
	for name, values := range flagValues[path] {
		if cmd.Flags().Lookup(name) != nil {
			_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	if !cmd.HasParent() {
		_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(flagValues[""]["output"], cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace))
		_ = cmd.RegisterFlagCompletionFunc("context", func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return a.complete(cmd, contextRes, args, toComplete)
		})
	}
	if md, ok := sortableCommands[path]; ok && md != nil {
		_ = cmd.RegisterFlagCompletionFunc("sort-by", cobra.FixedCompletions(sortFields(md, "", 0), cobra.ShellCompDirectiveNoFileComp))
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
		if inner := strings.Trim(w, "[]"); strings.HasPrefix(w, "[") && placeholders[inner] != noResource {
			// An optional argument ("retry WORKFLOW [STEP]") completes too.
			kinds, found = append(kinds, placeholders[inner]), true
			continue
		}
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
	if kind == contextRes {
		return a.completeContexts(toComplete), dir
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
	case workflowRes:
		res, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{PageSize: 100}))
		if err != nil {
			return nil, dir
		}
		names := a.installNames(ctx, c)
		for _, wf := range res.Msg.GetWorkflows() {
			add(wf.GetId(), kindName(wf.GetKind()), workflowStateName(wf.GetState()), "on", cmp.Or(names[wf.GetInstallId()], wf.GetInstallId()))
		}
	case stepRes:
		if len(args) == 0 {
			return nil, dir
		}
		res, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: args[0]}))
		if err != nil {
			return nil, dir
		}
		for _, st := range res.Msg.GetWorkflow().GetSteps() {
			add(st.GetName(), stepStateName(st.GetState()))
		}
	case revisionRes:
		app := a.revisionsApp(ctx, c, cmd, args)
		if app == "" {
			return nil, dir
		}
		res, err := c.ListAppRevisions(ctx, connect.NewRequest(&imsv1.ListAppRevisionsRequest{App: app}))
		if err != nil {
			return nil, dir
		}
		for _, r := range res.Msg.GetRevisions() {
			add(strconv.FormatInt(r.GetNumber(), 10), r.GetVersion(), ago(a.now(), r.GetCreateTime()))
		}
	case releaseRes:
		res, err := c.ListReleases(ctx, connect.NewRequest(&imsv1.ListReleasesRequest{PageSize: 100}))
		if err != nil {
			return nil, dir
		}
		for _, r := range res.Msg.GetReleases() {
			add(r.GetId(), r.GetAppName(), revisionText(r), releaseStateName(r.GetState()))
		}
	case tokenRes:
		res, err := c.ListApiTokens(ctx, connect.NewRequest(&imsv1.ListApiTokensRequest{}))
		if err != nil {
			return nil, dir
		}
		for _, tok := range res.Msg.GetTokens() {
			add(tok.GetName(), roleName(tok.GetGrant().GetRole()), scopeText(tok.GetGrant().GetScope()))
		}
	case pluginRes:
		res, err := c.ListPluginTypes(ctx, connect.NewRequest(&imsv1.ListPluginTypesRequest{}))
		if err != nil {
			return nil, dir
		}
		for _, p := range res.Msg.GetPluginTypes() {
			if p.GetBuiltin() {
				add(p.GetType(), "built-in")
			} else {
				add(p.GetType(), p.GetVersion())
			}
		}
	case roleRes:
		if len(args) == 0 {
			return nil, dir
		}
		res, err := c.GetBreakGlassPolicy(ctx, connect.NewRequest(&imsv1.GetBreakGlassPolicyRequest{Install: args[0]}))
		if err != nil {
			return nil, dir
		}
		for _, r := range res.Msg.GetRoles() {
			add(r.GetName(), r.GetDescription())
		}
	}
	return out, dir
}

// revisionsApp is the app whose revisions a --revision or REV argument
// of cmd names: app diff's APP; --app when given; else the app of the
// install named by the first argument.
func (a *app) revisionsApp(ctx context.Context, c *client, cmd *cobra.Command, args []string) string {
	if cmd.CommandPath() == "byoc app diff" {
		if len(args) > 0 {
			return args[0]
		}
		return ""
	}
	if f := cmd.Flags().Lookup("app"); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	if len(args) == 0 {
		return ""
	}
	res, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: args[0]}))
	if err != nil {
		return ""
	}
	return res.Msg.GetInstall().GetAppId()
}

// completeContexts lists the config file's contexts starting with prefix.
func (a *app) completeContexts(prefix string) []cobra.Completion {
	path, err := configPath(a.getenv)
	if err != nil {
		return nil
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, name := range cfg.Names() {
		if strings.HasPrefix(name, prefix) {
			out = append(out, cobra.CompletionWithDesc(name, cfg.Context(name).Server))
		}
	}
	return out
}
