package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) authCommand() *cobra.Command {
	return group("auth", "Who you are and what you may do: roles, grants and checks",
		a.whoamiCommand(),
		a.canICommand(),
	)
}

func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the server, who you are and your roles, with where each comes from",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.WhoAmI(cmd.Context(), connect.NewRequest(&imsv1.WhoAmIRequest{}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			m := res.Msg
			f := newFields(a.stdout)
			f.add("Server", c.target.server)
			f.add("Context", c.target.context)
			if m.GetKind() == "user" {
				f.add("Signed in as", m.GetName())
			} else {
				f.add("Token name", m.GetName())
				f.add("Token ID", m.GetTokenId())
			}
			if m.GetRole() != imsv1.Role_ROLE_UNSPECIFIED {
				f.add("Role", roleName(m.GetRole()))
			}
			if m.GetExpireTime() != nil {
				f.add("Expires", when(a.now(), m.GetExpireTime()))
			}
			if len(m.GetGrants()) == 0 {
				f.add("Grants", "none: you may not see or do anything")
			}
			for i, g := range m.GetGrants() {
				key := ""
				if i == 0 {
					key = "Grants"
				}
				f.add(key, grantText(g))
			}
			return f.flush()
		},
	}
}

// grantText is "support on install acme (group support-acme)".
func grantText(g *imsv1.RoleGrant) string {
	return roleName(g.GetRole()) + " on " + scopeText(g.GetScope()) + " (" + g.GetSource() + ")"
}

// scopeText describes a grant's scope.
func scopeText(s string) string {
	if s == "" {
		return "every install"
	}
	k, v, _ := strings.Cut(s, ":")
	if k == "selector" {
		return "installs with labels " + v
	}
	return k + " " + v
}

func roleName(r imsv1.Role) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_"))
}

func (a *app) canICommand() *cobra.Command {
	var app string
	cmd := &cobra.Command{
		Use:   "can-i VERB [INSTALL]",
		Short: "Say whether you may do VERB on an install (or an app, or everything), and by which grant",
		Long: `Say whether your roles allow VERB on INSTALL (or, with --app, on an app;
with neither, on everything), and which grant allows it. Exits 0 when
allowed and 1 when not, so scripts can test it.

Verbs: view, deploy, provision, update, deprovision, approve, cancel,
retry, enrol, action, debug (run an action whose mode is break_glass),
break-glass, manage (tokens, plugin types, builds).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("missing VERB")
			}
			if len(args) > 2 {
				return usagef("unexpected argument %q", args[2])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			req := &imsv1.CheckAccessRequest{Verb: args[0], App: app}
			if len(args) > 1 {
				req.Install = args[1]
			}
			res, err := c.CheckAccess(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"app", "--app"})
			}
			if a.jsonOutput() {
				if err := writeJSON(a.stdout, res.Msg); err != nil {
					return err
				}
			} else if res.Msg.GetAllowed() {
				fmt.Fprintf(a.stdout, "yes: %s\n", grantText(res.Msg.GetGrant()))
			} else {
				fmt.Fprintf(a.stdout, "no: %s\n", res.Msg.GetReason())
			}
			if !res.Msg.GetAllowed() {
				return &exitCodeError{code: exitError}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&app, "app", "", "check on this app instead of an install")
	return cmd
}

func (a *app) tokenCommand() *cobra.Command {
	return group("token", "Create, list and revoke named API tokens (admin)",
		a.tokenCreateCommand(),
		a.tokenListCommand(),
		a.tokenRevokeCommand(),
	)
}

// parseTTL reads --expires: a Go duration or a number of days ("30d").
func parseTTL(v string) (time.Duration, error) {
	if v == "" || v == "never" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return 0, usagef("--expires: %q is not a number of days (30d) or a duration (12h)", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, usagef("--expires: %q is not a number of days (30d) or a duration (12h)", v)
	}
	return d, nil
}

var roleFlags = map[string]imsv1.Role{"viewer": imsv1.Role_ROLE_VIEWER, "operator": imsv1.Role_ROLE_OPERATOR,
	"support": imsv1.Role_ROLE_SUPPORT, "admin": imsv1.Role_ROLE_ADMIN}

func (a *app) tokenCreateCommand() *cobra.Command {
	var name, role, install, appName, selector, expires string
	cmd := &cobra.Command{
		Use:   "create --name NAME --role ROLE [--install X | --app Y | --selector SEL] [--expires 30d]",
		Short: "Create a named API token with one role grant; its secret is shown once",
		Long: `Create a named API token holding ROLE on every install, or only on one
install (--install), one app and its installs (--app) or the installs
whose labels a selector matches (--selector env=staging). The secret is
printed once; imsd keeps only its hash. --expires takes days (30d) or a
duration (12h); without it the token works until revoked.

Roles: viewer (read), operator (deploy, run actions), support (request
break-glass, run debug actions), admin (everything, including tokens,
plugin types and builds).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, ok := roleFlags[role]
			if !ok {
				return usagef("--role: %q is not a role: use viewer, operator, support or admin", role)
			}
			ttl, err := parseTTL(expires)
			if err != nil {
				return err
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CreateApiToken(cmd.Context(), connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: name, Role: r,
				Install: install, App: appName, Selector: selector, TtlSeconds: int64(ttl / time.Second)}))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"name", "--name"}, fieldFlag{"install", "--install"}, fieldFlag{"app", "--app"},
					fieldFlag{"selector", "--selector"}, fieldFlag{"ttl_seconds", "--expires"})
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			info := res.Msg.GetInfo()
			fmt.Fprintf(a.stderr, "created token %s (%s): %s", info.GetName(), info.GetId(), grantText(info.GetGrant()))
			if info.GetExpireTime() != nil {
				fmt.Fprintf(a.stderr, ", expires %s", info.GetExpireTime().AsTime().UTC().Format(time.RFC3339))
			}
			fmt.Fprintln(a.stderr, "; the secret below is shown once:")
			fmt.Fprintln(a.stdout, res.Msg.GetToken())
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the token's name (lowercase letters, digits and -)")
	cmd.Flags().StringVar(&role, "role", "", "viewer, operator, support or admin")
	cmd.Flags().StringVar(&install, "install", "", "grant the role on this install only")
	cmd.Flags().StringVar(&appName, "app", "", "grant the role on this app and its installs only")
	cmd.Flags().StringVar(&selector, "selector", "", "grant the role on the installs whose labels match (env=staging)")
	cmd.Flags().StringVar(&expires, "expires", "", "how long the token works: days (30d) or a duration (12h); default until revoked")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func (a *app) tokenListCommand() *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "list [--watch]",
		Short: "List the unrevoked API tokens with their grant, expiry and last use",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			return runList(cmd.Context(), a, watch, listing[*imsv1.ApiToken]{
				// Only unrevoked tokens are listed: one that leaves was revoked.
				noun: "tokens", gone: "revoked", goneColumn: "EXPIRES",
				fetch: func(ctx context.Context) ([]*imsv1.ApiToken, error) {
					res, err := c.ListApiTokens(ctx, connect.NewRequest(&imsv1.ListApiTokensRequest{}))
					if err != nil {
						return nil, c.wrap(err)
					}
					return res.Msg.GetTokens(), nil
				},
				id:     (*imsv1.ApiToken).GetId,
				header: []string{"NAME", "ID", "ROLE", "SCOPE", "CREATED", "EXPIRES", "LAST USED", "CREATED BY"},
				row: func(_ context.Context, now time.Time, tok *imsv1.ApiToken) []string {
					exp, used := "never", "never"
					if tok.GetExpireTime() != nil {
						exp = ago(now, tok.GetExpireTime())
					}
					if tok.GetLastUsedTime() != nil {
						used = ago(now, tok.GetLastUsedTime())
					}
					return []string{tok.GetName(), tok.GetId(), roleName(tok.GetGrant().GetRole()), scopeText(tok.GetGrant().GetScope()),
						ago(now, tok.GetCreateTime()), exp, used, tok.GetCreatedBy()}
				},
			})
		},
	}
	watchFlag(cmd, &watch, "each token again as it changes (its last use; new ones too; a revoked one as revoked)")
	return cmd
}

func (a *app) tokenRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME|ID",
		Short: "Revoke an API token; it stops working within seconds",
		Args:  exactArgs("NAME|ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.RevokeApiToken(cmd.Context(), connect.NewRequest(&imsv1.RevokeApiTokenRequest{IdOrName: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			fmt.Fprintf(a.stdout, "revoked token %s (%s)\n", res.Msg.GetToken().GetName(), res.Msg.GetToken().GetId())
			return nil
		},
	}
}
