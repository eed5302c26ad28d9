package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) contextCommand() *cobra.Command {
	return group("context", "Manage contexts: named servers and the tokens to present to them",
		a.contextAddCommand(),
		a.contextUseCommand(),
		a.contextListCommand(),
		a.contextRemoveCommand(),
		a.contextCurrentCommand(),
	)
}

// editConfig loads the config, lets edit change it, and saves it.
func (a *app) editConfig(edit func(path string, cfg *Config) error) error {
	path, err := configPath(a.getenv)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	if err := edit(path, cfg); err != nil {
		return err
	}
	return saveConfig(path, cfg)
}

func (a *app) readConfig() (string, *Config, error) {
	path, err := configPath(a.getenv)
	if err != nil {
		return "", nil, err
	}
	cfg, err := loadConfig(path)
	return path, cfg, err
}

func (a *app) contextAddCommand() *cobra.Command {
	var server, token string
	var use bool
	cmd := &cobra.Command{
		Use:   "add NAME --server URL --token TOKEN [--use]",
		Short: "Add a context, or replace one of the same name",
		Long: `Add a context: a name for an imsd server and the API token to present to it.
Pass --token - to read the token from standard input, which keeps it out of
the shell history.`,
		Example: "  byoc context add dev --server http://127.0.0.1:8080 --token byoc_op_... --use",
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if strings.TrimSpace(name) == "" {
				return usagef("the context name must not be empty")
			}
			if err := checkServerURL(server); err != nil {
				return &usageError{msg: err.Error()}
			}
			if token == "-" {
				line, err := bufio.NewReader(a.stdin).ReadString('\n')
				if err != nil && line == "" {
					return fmt.Errorf("read token from standard input: %w", err)
				}
				token = strings.TrimSpace(line)
			}
			if token == "" {
				return usagef("--token must not be empty")
			}
			var replaced bool
			err := a.editConfig(func(_ string, cfg *Config) error {
				replaced = cfg.Put(ConfigContext{Name: name, Server: server, Token: token})
				if use || len(cfg.Contexts) == 1 && cfg.CurrentContext == "" {
					use = true
					cfg.CurrentContext = name
				}
				return nil
			})
			if err != nil {
				return err
			}
			verb := "Added"
			if replaced {
				verb = "Replaced"
			}
			fmt.Fprintf(a.stdout, "%s context %q for %s.\n", verb, name, server)
			if use {
				fmt.Fprintf(a.stdout, "Switched to context %q.\n", name)
			}
			return nil
		},
	}
	// --server and --token are global flags too; the local ones shadow them
	// here, where they describe the context rather than override it.
	cmd.Flags().StringVar(&server, "server", "", "imsd URL (http:// or https://)")
	cmd.Flags().StringVar(&token, "token", "", "API token, or - to read it from standard input")
	cmd.Flags().BoolVar(&use, "use", false, "make it the current context")
	_ = cmd.MarkFlagRequired("server")
	_ = cmd.MarkFlagRequired("token")
	return cmd
}

func (a *app) contextUseCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "use NAME",
		Short: "Make a context the current one",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			err := a.editConfig(func(path string, cfg *Config) error {
				if cfg.Context(name) == nil {
					return errNoContext(path, name, cfg)
				}
				cfg.CurrentContext = name
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Switched to context %q.\n", name)
			return nil
		},
	}
}

func errNoContext(path, name string, cfg *Config) error {
	if len(cfg.Contexts) == 0 {
		return fmt.Errorf("context %q not found: %s has no contexts; add one with: byoc context add %s --server URL --token TOKEN", name, path, name)
	}
	return fmt.Errorf("context %q not found; the contexts are: %s", name, strings.Join(cfg.Names(), ", "))
}

// contextView is what "context list -o json" prints: a context without its
// token.
type contextView struct {
	Name    string `json:"name"`
	Server  string `json:"server"`
	Current bool   `json:"current"`
}

func (a *app) contextListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List contexts; the current one is marked with *",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, cfg, err := a.readConfig()
			if err != nil {
				return err
			}
			views := make([]contextView, 0, len(cfg.Contexts))
			for _, c := range cfg.Contexts {
				views = append(views, contextView{Name: c.Name, Server: c.Server, Current: c.Name == cfg.CurrentContext})
			}
			if a.jsonOutput() {
				b, err := json.MarshalIndent(views, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s\n", b)
				return err
			}
			if len(views) == 0 {
				fmt.Fprintf(a.stderr, "No contexts in %s; add one with: byoc context add NAME --server URL --token TOKEN --use\n", path)
				return nil
			}
			t := newTable(a.stdout, "CURRENT", "NAME", "SERVER")
			for _, v := range views {
				mark := " "
				if v.Current {
					mark = "*"
				}
				t.row(mark, v.Name, v.Server)
			}
			return t.flush()
		},
	}
}

func (a *app) contextRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "remove NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a context and its token",
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			var wasCurrent bool
			err := a.editConfig(func(path string, cfg *Config) error {
				wasCurrent = cfg.CurrentContext == name
				if !cfg.Remove(name) {
					return errNoContext(path, name, cfg)
				}
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Removed context %q.\n", name)
			if wasCurrent {
				fmt.Fprintln(a.stdout, "No context is current now; pick one with: byoc context use NAME")
			}
			return nil
		},
	}
}

func (a *app) contextCurrentCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "current",
		Short: "Print the current context's name",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, cfg, err := a.readConfig()
			if err != nil {
				return err
			}
			if cfg.CurrentContext == "" {
				return errors.New("no context is current; add one with: byoc context add NAME --server URL --token TOKEN --use")
			}
			if a.jsonOutput() {
				v := contextView{Name: cfg.CurrentContext, Current: true}
				for _, c := range cfg.Contexts {
					if c.Name == cfg.CurrentContext {
						v.Server = c.Server
					}
				}
				return writeJSONValue(a.stdout, v)
			}
			fmt.Fprintln(a.stdout, cfg.CurrentContext)
			return nil
		},
	}
}
