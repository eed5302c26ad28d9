package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/labels"
	"github.com/byoc-dev/byoc/internal/reltime"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/console"
)

func (a *app) installCommand() *cobra.Command {
	return group("install", "Create and inspect installs and their agents",
		a.installCreateCommand(),
		a.installListCommand(),
		a.installGetCommand(),
		a.installTokenCommand(),
		a.installLabelCommand(),
		a.installProvisionCommand(),
		a.installUpdateCommand(),
		a.installPlanCommand(),
		a.installDeprovisionCommand(),
		a.installDriftCommand(),
		a.installStackCommand(),
		a.installImagesCommand(),
		a.installArtifactsCommand(),
	)
}

// ttlSeconds converts a --ttl style flag to whole seconds; 0 means the
// server's default.
func ttlSeconds(flag string, d time.Duration) (int64, error) {
	if d < 0 || d%time.Second != 0 {
		return 0, usagef("--%s must be a positive whole number of seconds, such as 30m or 24h", flag)
	}
	return int64(d / time.Second), nil
}

// parseInputs turns k=v flags into a map.
func parseInputs(kvs []string) (map[string]string, error) {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--input %q must be KEY=VALUE", kv)
		}
		if _, dup := m[k]; dup {
			return nil, usagef("--input %q is given twice", k)
		}
		m[k] = v
	}
	return m, nil
}

// printEnrollment prints an enrolment token and the agentd command line
// that uses it.
func (a *app) printEnrollment(c *client, install string, tok *imsv1.EnrollmentToken) {
	now := a.now()
	fmt.Fprintf(a.stdout, "Enrolment token (single use, shown once; expires %s):\n  %s\n\n",
		ago(now, tok.GetExpireTime()), tok.GetToken())
	fmt.Fprintf(a.stdout, "Run the install's agent with:\n  agentd --ims %s --enroll-token %s --state-dir %s\n",
		shellQuote(c.target.server), shellQuote(tok.GetToken()), shellQuote("./agent-"+install))
}

func (a *app) installCreateCommand() *cobra.Command {
	var appName string
	var inputs, lbls []string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create NAME --app APP [--input KEY=VALUE ...] [--label KEY=VALUE ...] [--token-ttl 24h]",
		Short: "Create an install of an app and print its agent's enrolment token",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := parseInputs(inputs)
			if err != nil {
				return err
			}
			secs, err := ttlSeconds("token-ttl", ttl)
			if err != nil {
				return err
			}
			lc, err := labels.ParseChange(lbls)
			if err != nil || len(lc.Remove) > 0 {
				return usagef("--label: %v", cmp.Or(err, errors.New("takes KEY=VALUE")))
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CreateInstall(cmd.Context(), connect.NewRequest(&imsv1.CreateInstallRequest{
				App:                       appName,
				Name:                      args[0],
				Inputs:                    in,
				Labels:                    lc.Set,
				EnrollmentTokenTtlSeconds: secs,
			}))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"inputs", "--input"}, fieldFlag{"app", "--app"},
					fieldFlag{"enrollment_token_ttl_seconds", "--token-ttl"}, fieldFlag{"labels", "--label"})
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			ins := res.Msg.GetInstall()
			fmt.Fprintf(a.stdout, "Created install %q (id %s) of app %s.\n\n", ins.GetName(), ins.GetId(), appName)
			a.printEnrollment(c, ins.GetName(), res.Msg.GetEnrollmentToken())
			return nil
		},
	}
	cmd.Flags().StringVar(&appName, "app", "", "the app (name or id)")
	cmd.Flags().StringArrayVar(&inputs, "input", nil, "an input as KEY=VALUE (repeatable)")
	cmd.Flags().StringArrayVar(&lbls, "label", nil, "a label as KEY=VALUE (repeatable)")
	cmd.Flags().DurationVar(&ttl, "token-ttl", 0, "enrolment token lifetime (default: the server's, 24h)")
	_ = cmd.MarkFlagRequired("app")
	return cmd
}

// installHeader is the header of install tables.
func (a *app) installHeader() []string {
	h := []string{"NAME", "APP", "STATE", "HEALTH", "REVISION", "AGENT", "AGENT HEALTH", "LAST SEEN", "CREATED"}
	if a.wideOutput() {
		h = []string{"NAME", "ID", "APP", "APP ID", "STATE", "HEALTH", "REVISION", "AGENT", "AGENT HEALTH", "LAST SEEN", "CREATED", "UPDATE"}
	}
	if a.showLabels || a.wideOutput() {
		h = append(h, "LABELS")
	}
	return h
}

// installRow is install ins's row of an install table; appNames maps app
// ids to names.
func (a *app) installRow(ins *imsv1.Install, appNames map[string]string, now time.Time) []string {
	app := cmp.Or(appNames[ins.GetAppId()], ins.GetAppId())
	rest := []string{ins.GetState(), healthState(ins.GetHealth()), fmt.Sprint(ins.GetAppRevision()), agentState(ins.GetAgent()),
		agentHealth(now, ins.GetAgent()), heard(now, ins.GetAgent()), ago(now, ins.GetCreateTime())}
	if a.wideOutput() {
		rest = append(rest, updatePolicyShort(ins.GetAgent().GetUpdate()))
	}
	if a.showLabels || a.wideOutput() {
		rest = append(rest, cmp.Or(labels.Format(ins.GetLabels()), "<none>"))
	}
	if a.wideOutput() {
		return append([]string{ins.GetName(), ins.GetId(), app, ins.GetAppId()}, rest...)
	}
	return append([]string{ins.GetName(), app}, rest...)
}

func (a *app) installListCommand() *cobra.Command {
	var appName, selector string
	var watch, all bool
	cmd := &cobra.Command{
		Use:     "list [--app APP] [-l SELECTOR] [--show-labels] [--all] [--watch]",
		Aliases: []string{"ls"},
		Short:   "List installs and whether their agents are connected",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			if watch {
				if all {
					return &usageError{"byoc install list: --all lists once; watch the build agent's install with --app _vendor --watch"}
				}
				return a.watchInstalls(cmd.Context(), c, appName, selector)
			}
			res, err := c.ListInstalls(cmd.Context(), connect.NewRequest(&imsv1.ListInstallsRequest{App: appName, Selector: selector, IncludeVendor: all}))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
			}
			if err := sortRows(a, res.Msg.GetInstalls()); err != nil {
				return err
			}
			if a.jsonOutput() {
				return writeJSONList(a.stdout, res.Msg.GetInstalls())
			}
			if len(res.Msg.GetInstalls()) == 0 {
				if selector != "" {
					fmt.Fprintf(a.stderr, "No installs match %s.\n", selector)
					return nil
				}
				fmt.Fprintln(a.stderr, "No installs; create one with: byoc install create NAME --app APP")
				return nil
			}
			// Tables name the app; its id is in -o wide and -o json.
			appNames := a.appNames(cmd.Context(), c)
			now := a.now()
			t := newTable(a.stdout, a.installHeader()...)
			for _, ins := range res.Msg.GetInstalls() {
				t.row(a.installRow(ins, appNames, now)...)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&appName, "app", "", "only installs of this app (name or id)")
	cmd.Flags().BoolVar(&all, "all", false, "also list the vendor's build agent's reserved install (_vendor), left out otherwise")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the list, print each install again as it changes (its agent, state, health) until Ctrl-C")
	selectorFlag(cmd, &selector, "installs")
	cmd.Flags().BoolVar(&a.showLabels, "show-labels", false, "add a LABELS column (-o wide has it too)")
	return cmd
}

// heard is the LAST SEEN of an agent: "now" while its stream is live (imsd
// writes last-seen only once per lease then, so the time would read up to
// a lease old), else when its last message came.
func heard(now time.Time, ag *imsv1.AgentStatus) string {
	if ag.GetConnected() {
		return "now"
	}
	return ago(now, ag.GetLastSeenTime())
}

// appNames maps app ids to names for a table; an app it cannot list keeps
// its id (a table is still worth printing). It names the vendor's build
// agent's app too (_vendor), for install list --all.
func (a *app) appNames(ctx context.Context, c *client) map[string]string {
	names := map[string]string{}
	res, err := c.ListApps(ctx, connect.NewRequest(&imsv1.ListAppsRequest{IncludeVendor: true}))
	if err != nil {
		return names
	}
	for _, ap := range res.Msg.GetApps() {
		names[ap.GetId()] = ap.GetName()
	}
	return names
}

// appName is the name of app id for people; its id when imsd cannot say.
func (a *app) appName(ctx context.Context, c *client, id string) string {
	res, err := c.GetApp(ctx, connect.NewRequest(&imsv1.GetAppRequest{IdOrName: id}))
	if err != nil || res.Msg.GetApp().GetName() == "" {
		return id
	}
	return res.Msg.GetApp().GetName()
}

// installName is the name of install id for people; its id when imsd
// cannot say.
func (a *app) installName(ctx context.Context, c *client, id string) string {
	if id == "" {
		return ""
	}
	res, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: id}))
	if err != nil || res.Msg.GetInstall().GetName() == "" {
		return id
	}
	return res.Msg.GetInstall().GetName()
}

// installNames maps install ids to names for a table, like appNames. It
// names the vendor's build agent's install too (_vendor), which install
// list leaves out: build jobs and the build install's audit chain are
// shown by its name, as job get and install list --all show it.
func (a *app) installNames(ctx context.Context, c *client) map[string]string {
	names := map[string]string{}
	res, err := c.ListInstalls(ctx, connect.NewRequest(&imsv1.ListInstallsRequest{IncludeVendor: true}))
	if err != nil {
		return names
	}
	for _, ins := range res.Msg.GetInstalls() {
		names[ins.GetId()] = ins.GetName()
	}
	return names
}

// healthState is an install's health for a table: "-" until a health
// check has ended.
func healthState(h *imsv1.InstallHealth) string {
	if h.GetState() == "" {
		return "-"
	}
	return h.GetState()
}

// healthText is an install's health with when and why.
func healthText(now time.Time, h *imsv1.InstallHealth) string {
	if h.GetState() == "" {
		return "unknown (no health-check action has run)"
	}
	s := h.GetState() + ", checked " + ago(now, h.GetCheckTime()) + " by run " + h.GetWorkflowId()
	if h.GetError() != "" {
		s += ": " + h.GetError()
	}
	return s
}

// agentHealth is the agent's health for a table, with how long it has
// held: "offline (12m)"; "-" when imsd says none.
func agentHealth(now time.Time, s *imsv1.AgentStatus) string {
	if s.GetHealth() == "" {
		return "-"
	}
	if t := s.GetHealthTime(); t != nil {
		return fmt.Sprintf("%s (%s)", s.GetHealth(), reltime.Duration(max(now.Sub(t.AsTime()), 0)))
	}
	return s.GetHealth()
}

// agentHealthText is the agent's health with since when and why.
func agentHealthText(now time.Time, s *imsv1.AgentStatus) string {
	if s.GetHealth() == "" {
		return "unknown (imsd reports none)"
	}
	out := s.GetHealth() + " since " + when(now, s.GetHealthTime())
	if r := s.GetHealthReason(); r != "" {
		out += ": " + r
	}
	return out
}

func agentState(s *imsv1.AgentStatus) string {
	switch {
	case s == nil:
		return "not enrolled"
	case s.GetRevokeTime() != nil:
		return "revoked"
	case s.GetIdentityConflict() != "":
		return "identity conflict"
	case s.GetConnected() && s.GetPermissions().GetDisabledAll():
		return "disabled by customer"
	case s.GetConnected():
		return "connected"
	default:
		return "disconnected"
	}
}

// permissionsText is the customer's permission state as the agent last
// reported it: each mode on or off, the kill switch, and when.
func permissionsText(now time.Time, p *imsv1.Permissions) string {
	if p == nil {
		return "not reported yet (the agent reports them when it connects)"
	}
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	s := fmt.Sprintf("%s: provision %s, maintenance %s, deprovision %s, break_glass %s", console.ModesText(&imsv1.Permissions{
		Provision: p.GetProvision(), Maintenance: p.GetMaintenance(), Deprovision: p.GetDeprovision(), BreakGlass: p.GetBreakGlass(),
	}), onOff(p.GetProvision()), onOff(p.GetMaintenance()), onOff(p.GetDeprovision()), onOff(p.GetBreakGlass()))
	if p.GetDisabledAll() {
		s = "ALL JOBS DISABLED BY THE CUSTOMER (every job is refused); modes " + s
	}
	if p.GetChangeTime() != nil {
		s += "; changed by the customer " + ago(now, p.GetChangeTime())
	}
	if p.GetReportTime() != nil {
		s += "; reported " + ago(now, p.GetReportTime())
	}
	return s
}

func (a *app) installGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show an install (by name or id) and its agent",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.GetInstall(cmd.Context(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			ins := res.Msg.GetInstall()
			if a.jsonOutput() {
				return writeJSON(a.stdout, ins)
			}
			now := a.now()
			f := newFields(a.stdout)
			f.add("Name", ins.GetName())
			f.add("ID", ins.GetId())
			f.add("App", a.appName(cmd.Context(), c, ins.GetAppId()))
			if a.wideOutput() {
				f.add("App ID", ins.GetAppId())
			}
			f.add("Created", when(now, ins.GetCreateTime()))
			f.add("Inputs", keyValues(ins.GetInputs()))
			f.add("Labels", cmp.Or(labels.Format(ins.GetLabels()), "<none>"))
			f.add("State", ins.GetState())
			f.add("Health", healthText(now, ins.GetHealth()))
			if ins.GetAppRevision() > 0 {
				f.add("App revision", fmt.Sprint(ins.GetAppRevision()))
			}
			if st := settingsText(ins.GetSettings()); st != "" {
				f.add("Settings", st)
			}
			for _, l := range windowsText(now, ins) {
				f.add(l[0], l[1])
			}
			ag := ins.GetAgent()
			state := agentState(ag)
			if ag.GetConnected() || ag.GetLastSeenTime() != nil {
				state += ", last seen " + heard(now, ag)
			}
			f.add("Agent", state)
			if ag != nil {
				if ag.GetRevokeTime() != nil {
					f.add("Agent revoked", when(now, ag.GetRevokeTime())+": "+ag.GetRevokeReason())
				}
				f.add("Agent health", agentHealthText(now, ag))
				f.add("Agent ID", ag.GetAgentId())
				f.add("Agent version", ag.GetVersion())
				f.add("Agent host", ag.GetHostname())
				if k := agentKeyText(now, ag); k != "" {
					f.add("Agent key", k)
				}
				if c := ag.GetIdentityConflict(); c != "" {
					f.add("Agent warning", c)
				}
				f.add("Permissions", permissionsText(now, ag.GetPermissions()))
				f.add("Agent updates", updatePolicyText(ag.GetUpdate()))
				if d := updateDecisionText(now, ag.GetUpdate()); d != "" {
					f.add("Last agent update", d)
				}
				if o := updateOfferText(now, ag); o != "" {
					f.add("Agent update offer", o)
				}
				if st := ag.GetStack(); st != nil {
					f.add("Install stack", fmt.Sprintf("%s %s, reported %s", st.GetFormat(), st.GetStack(), ago(now, st.GetReportTime())))
					// Sensitive ones the agent reports as "set", never by value.
					f.add("Customer inputs", keyValues(st.GetInputs()))
					f.add("Stack outputs", keyValues(st.GetOutputs()))
				}
				f.add("Enrolled", when(now, ag.GetEnrollTime()))
			}
			// Drift is a second call: an imsd without it leaves it out.
			if dr, err := c.ListInstallDrift(cmd.Context(), connect.NewRequest(&imsv1.ListInstallDriftRequest{Install: ins.GetId()})); err == nil {
				if s := driftSummary(dr.Msg.GetComponents()); s != "" {
					f.add("Drift", s+" (byoc install drift "+ins.GetName()+")")
				}
			}
			if err := f.flush(); err != nil {
				return err
			}
			if ag == nil {
				fmt.Fprintf(a.stderr, "No agent has enrolled; get a new enrolment token with: byoc install token %s\n", ins.GetName())
			}
			return nil
		},
	}
}

func (a *app) installTokenCommand() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token NAME [--ttl 24h]",
		Short: "Issue a new single-use enrolment token for an install's agent",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			secs, err := ttlSeconds("ttl", ttl)
			if err != nil {
				return err
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CreateEnrollmentToken(cmd.Context(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{
				Install:    args[0],
				TtlSeconds: secs,
			}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			a.printEnrollment(c, args[0], res.Msg.GetEnrollmentToken())
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "token lifetime (default: the server's, 24h)")
	return cmd
}

// agentKeyText is the agent's own key as install get shows it: its id,
// when it last rotated, and a rotation under way.
func agentKeyText(now time.Time, ag *imsv1.AgentStatus) string {
	k := ag.GetKeyId()
	if k == "" {
		return ""
	}
	if ag.GetKeyRotateTime() != nil {
		k += ", rotated " + when(now, ag.GetKeyRotateTime())
	}
	if n := ag.GetNextKeyId(); n != "" {
		k += ", rotation under way to " + n
	}
	return k
}
