package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/schema/app/stack"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

func (a *app) installStackCommand() *cobra.Command {
	var format, out, imsURL, agentURL, agentSum, pluginsURL, pluginsSum, templateURL string
	var params []string
	cmd := &cobra.Command{
		Use:   "stack INSTALL [--format cloudformation|azure|bicep|gcp|local] [-o FILE] [--param NAME=VALUE ...]",
		Short: "Generate the install stack the customer runs in their own account",
		Long: `Generate INSTALL's install stack from its app revision (the one it last
applied, or the app's latest): the template the customer runs in their own
account, which creates the agent, a role per permission mode and the
install's registry, and whose parameters are the customer's control panel.

--format cloudformation (the default) writes a CloudFormation template (to
-o FILE, or stdout): a parameter per customer-provided input and secret
(NoEcho), the VPC choice, a true/false parameter per permission mode
(EnableProvision, EnableMaintenance, EnableDeprovision, EnableBreakGlass,
false by default) that conditions the mode's IAM role, the agent's EC2
instance and the install's ECR repository. The enrolment token is never a
parameter: the customer stores it (byoc install token INSTALL) in a Secrets
Manager secret and gives its ARN.

--format azure writes an ARM template (to -o FILE, or stdout) the customer
deploys into a resource group of theirs (az deployment group create, or the
portal's "Deploy to Azure" button: --template-url URL, where the template is
served, prints its link): a managed identity per permission mode with
Contributor on that resource group, while its parameter (EnableProvision,
EnableMaintenance, EnableDeprovision, EnableBreakGlass, false by default)
is true; the agent's VM (egress only), Key Vault holding the enrolment token
and each input and secret (secure parameters), and an Azure Container
Registry as the install registry. With -o FILE it also writes the
template's Bicep source beside it (FILE without .json, plus .bicep),
translated from the same template so the two always agree; --format bicep
writes the Bicep alone (to -o FILE, or stdout).

--format gcp writes a Terraform configuration (DIR/main.tf; -o DIR, default
./stack-INSTALL-gcp) the customer applies in a project of theirs with
Infrastructure Manager (gcloud infra-manager deployments apply) or
terraform: a service account per permission mode with the mode's gcp_roles
on that project while its variable (enable_provision, enable_maintenance,
enable_deprovision, enable_break_glass, false by default) is true, which
the agent impersonates per job; the agent's VM (no external address,
egress only), Secret Manager holding the enrolment token and each input
and secret (sensitive variables), and an Artifact Registry repository as
the install registry. --param takes the same names as the other formats
(EnableBreakGlass=true sets enable_break_glass's default).

--format local writes a directory (-o DIR, default ./stack-INSTALL) with
stack.json, secrets.env and agentd.sh, which runs agentd on this machine
with the same permission toggles and customer inputs, for development.

--param NAME=VALUE sets a parameter: its default in a template, its value
in a local stack.`,
		Args: exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "cloudformation" && format != "azure" && format != "bicep" && format != "gcp" && format != "local" {
				return usagef("--format %q: want cloudformation, azure, bicep, gcp or local", format)
			}
			if templateURL != "" && (format != "azure" || !strings.HasPrefix(templateURL, "https://")) {
				return usagef("--template-url %q: an https:// URL, with --format azure", templateURL)
			}
			kv, err := parseInputs(params)
			if err != nil {
				return err
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.GetInstallStack(cmd.Context(), connect.NewRequest(&imsv1.GetInstallStackRequest{Install: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			files := map[string][]byte{}
			for _, f := range res.Msg.GetFiles() {
				files[f.GetPath()] = f.GetContent()
			}
			if len(files) == 0 {
				// The app has no revision yet: a stack of the modes alone.
				files["app.toml"] = []byte(fmt.Sprintf("name = %q\n", res.Msg.GetApp()))
			}
			appCfg, err := load.Parse(files, validate.Options{AnyType: true, Stored: true})
			if err != nil {
				return fmt.Errorf("app %s revision %d: %w", res.Msg.GetApp(), res.Msg.GetAppRevision(), err)
			}
			in, err := c.GetInstall(cmd.Context(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: res.Msg.GetInstall()}))
			if err != nil {
				return c.wrap(err)
			}
			o := stack.Options{App: appCfg, Install: res.Msg.GetInstall(), Labels: in.Msg.GetInstall().GetLabels(), IMS: imsURL, IMSKeyID: res.Msg.GetSigningKeyId(),
				AgentURL: agentURL, AgentSHA256: agentSum, PluginsURL: pluginsURL, PluginsSHA256: pluginsSum, Params: kv}
			if o.IMS == "" {
				o.IMS = c.target.server
			}
			if format == "bicep" {
				src, err := stack.Bicep(o)
				if err != nil {
					return usagef("%v", err)
				}
				if out == "" || out == "-" {
					_, err = a.stdout.Write(src)
					return err
				}
				if err := os.WriteFile(out, src, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "wrote %s (install %s, app %s revision %d)\n", out, o.Install, res.Msg.GetApp(), res.Msg.GetAppRevision())
				fmt.Fprintf(a.stdout, "the customer deploys it into a resource group of theirs:\n  az deployment group create --resource-group byoc-%s --template-file %s --parameters AdminSshPublicKey=@$HOME/.ssh/id_ed25519.pub\n", o.Install, out)
				return nil
			}
			if format == "azure" {
				tmpl, err := stack.Azure(o)
				if err != nil {
					return usagef("%v", err)
				}
				if out == "" || out == "-" {
					_, err = a.stdout.Write(tmpl)
					return err
				}
				src, err := stack.ARMToBicep(tmpl)
				if err != nil {
					return fmt.Errorf("the template's Bicep source: %w", err)
				}
				bicepFile := strings.TrimSuffix(out, ".json") + ".bicep"
				if err := os.WriteFile(out, tmpl, 0o644); err != nil {
					return err
				}
				if err := os.WriteFile(bicepFile, src, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "wrote %s and its Bicep source %s (install %s, app %s revision %d)\n", out, bicepFile, o.Install, res.Msg.GetApp(), res.Msg.GetAppRevision())
				fmt.Fprintf(a.stdout, "the customer deploys it into a resource group of theirs (az prompts for the enrolment token, byoc install %s token, without echoing it):\n", o.Install)
				fmt.Fprintf(a.stdout, "  az group create --name byoc-%s --location LOCATION\n", o.Install)
				fmt.Fprintf(a.stdout, "  az deployment group create --resource-group byoc-%s --template-file %s --parameters AdminSshPublicKey=@$HOME/.ssh/id_ed25519.pub\n", o.Install, out)
				if templateURL != "" {
					fmt.Fprintf(a.stdout, "or with the Deploy to Azure button:\n  %s\n", stack.DeployToAzureURL(templateURL))
				} else {
					fmt.Fprintf(a.stdout, "or serve %s over HTTPS and give --template-url URL for its Deploy to Azure link\n", out)
				}
				return nil
			}
			if format == "gcp" {
				tf, err := stack.GCP(o)
				if err != nil {
					return usagef("%v", err)
				}
				dir := out
				if dir == "" {
					dir = "stack-" + o.Install + "-gcp"
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "main.tf"), tf, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "wrote %s/main.tf (install %s, app %s revision %d)\n", dir, o.Install, res.Msg.GetApp(), res.Msg.GetAppRevision())
				fmt.Fprintf(a.stdout, "the customer writes inputs.tfvars, readable only by them (chmod 600), with project_id = \"PROJECT\" and enrollment_token = \"TOKEN\" (byoc install %s token), and applies it in that project:\n", o.Install)
				fmt.Fprintf(a.stdout, "  gcloud infra-manager deployments apply projects/PROJECT/locations/REGION/deployments/byoc-%s --service-account=projects/PROJECT/serviceAccounts/DEPLOYER_EMAIL --local-source=%s --inputs-file=inputs.tfvars\n", o.Install, dir)
				fmt.Fprintf(a.stdout, "or: terraform -chdir=%s init && terraform -chdir=%s apply -var-file=$PWD/inputs.tfvars\n", dir, dir)
				return nil
			}
			if format == "cloudformation" {
				tmpl, err := stack.CloudFormation(o)
				if err != nil {
					return usagef("%v", err)
				}
				if out == "" || out == "-" {
					_, err = a.stdout.Write(tmpl)
					return err
				}
				if err := os.WriteFile(out, tmpl, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "wrote %s (install %s, app %s revision %d)\n", out, o.Install, res.Msg.GetApp(), res.Msg.GetAppRevision())
				return nil
			}
			lf, err := stack.Local(o)
			if err != nil {
				return usagef("%v", err)
			}
			dir := out
			if dir == "" {
				dir = "stack-" + o.Install
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			for _, f := range lf {
				path := filepath.Join(dir, f.Name)
				if f.Name == stack.LocalSecrets {
					// Values the customer typed in are kept.
					if _, err := os.Stat(path); err == nil {
						continue
					}
				}
				if err := os.WriteFile(path, f.Data, os.FileMode(f.Mode)); err != nil {
					return err
				}
				if err := os.Chmod(path, os.FileMode(f.Mode)); err != nil {
					return err
				}
			}
			fmt.Fprintf(a.stdout, "wrote %s/ (install %s, app %s revision %d)\nwrite the enrolment token (byoc install token %s) to %s, then run %s\n",
				dir, o.Install, res.Msg.GetApp(), res.Msg.GetAppRevision(), o.Install,
				filepath.Join(dir, stack.LocalToken), filepath.Join(dir, stack.LocalScript))
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "cloudformation", "cloudformation, azure, bicep, gcp or local")
	cmd.Flags().StringVar(&templateURL, "template-url", "", "with --format azure: the https `URL` the template will be served at, to print its Deploy to Azure link")
	// Shadows the global --output/-o (text, wide, json): here it is where
	// the stack goes.
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write the template to (default stdout; with azure, the Bicep source goes beside it), or the local stack's directory (default ./stack-INSTALL), or the gcp stack's (default ./stack-INSTALL-gcp)")
	cmd.Flags().StringArrayVar(&params, "param", nil, "a stack parameter, NAME=VALUE (repeatable)")
	cmd.Flags().StringVar(&imsURL, "ims-url", "", "imsd's URL as the agent reaches it (default: this context's server)")
	cmd.Flags().StringVar(&agentURL, "agent-url", "", "HTTPS URL the stack's instance downloads agentd (linux/amd64) from")
	cmd.Flags().StringVar(&agentSum, "agent-sha256", "", "SHA-256 of that agentd binary")
	cmd.Flags().StringVar(&pluginsURL, "plugins-url", "", "HTTPS URL the stack's instance downloads byoc-plugins (linux/amd64, the same release as agentd) from; installed beside agentd")
	cmd.Flags().StringVar(&pluginsSum, "plugins-sha256", "", "SHA-256 of that byoc-plugins binary")
	return cmd
}
