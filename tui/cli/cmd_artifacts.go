package cli

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// installArtifactsCommand lists every artifact an install's components
// deploy, with the agent's verdict on each: the supply-chain view of
// all kinds, where `install images` is the lineage of images.
func (a *app) installArtifactsCommand() *cobra.Command {
	var kind string
	var history bool
	cmd := &cobra.Command{
		Use:   "artifacts INSTALL",
		Short: "List the artifacts an install's components deploy, with the agent's supply-chain verdict on each",
		Long: `For each artifact a component of INSTALL deploys (an image component's
source, a helm component's chart, a terraform component's module), by
digest: what the install's agent verified of it under the customer's
supply-chain policy (agentd policy supply-chain). STATE is verified,
warned, refused, or "not verified" when no verification of that digest is
on record (no policy, or no plan or apply of it since). RULE names the
rules a refusal or a warning was for; KEY the trusted key whose signature
verified. An artifact the agent refused for a component that does not
run it (a refused first deploy, a refused new digest) is listed too, not
deployed. Rows are sorted by component, what it runs first.

Then, kind plugin, the plugin releases the install's agent pinned
(agentd plugin install, agentd plugin pin --release), by component
type: verified (installed, its signature by the imsd key KEY checked
when VERIFIED says), refused (the agent's install of it failed a check
when a job needed it: RULE release, the reason in -o json), or "not
verified" (pinned, not installed yet). A release the agent refused is
not deployed: the type does not run it.

--history lists every verification on record instead, the newest first:
imsd keeps the newest 100 of each component, and of each agent's plugin
release of one type (a plugin release's once for each time the agent
checked it).

--kind keeps one kind. -o wide shows full digests and the job that
verified (for a plugin release, the agent that reported it); -o json|yaml each artifact with the agent's whole report (the
attestations found, each rule not met and why). byoc install images shows
an image's lineage (source, build, install copy).`,
		Args: exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch kind {
			case "", "image", "chart", "module", "plugin":
			default:
				return usagef("--kind must be image, chart, module or plugin, got %q", kind)
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.ListInstallArtifacts(cmd.Context(), connect.NewRequest(&imsv1.ListInstallArtifactsRequest{Install: args[0], Kind: kind, History: history}))
			if err != nil {
				return c.wrap(err)
			}
			rows := res.Msg.GetArtifacts()
			if err := sortRows(a, rows); err != nil {
				return err
			}
			if a.jsonOutput() {
				return writeJSONList(a.stdout, rows)
			}
			if len(rows) == 0 {
				what := "artifact"
				if kind != "" {
					what = kind
				}
				if history {
					fmt.Fprintf(a.stdout, "No verification of install %s's %ss is on record.\n", args[0], what)
					return nil
				}
				fmt.Fprintf(a.stdout, "Install %s deploys no %s by digest yet.\n", args[0], what)
				return nil
			}
			now := a.now()
			header := []string{"COMPONENT", "KIND", "ARTIFACT", "DIGEST", "STATE", "RULE", "KEY", "VERIFIED"}
			if a.wideOutput() {
				header = append(header, "JOB")
			}
			t := newTable(a.stdout, header...)
			for _, r := range rows {
				name, _, _ := strings.Cut(r.GetReference(), "@")
				comp, job := r.GetComponent(), r.GetVerification().GetJobId()
				if r.GetKind() == "plugin" {
					// A plugin release runs a type, not a component.
					comp, job = "type "+r.GetComponentType(), "agent "+r.GetAgentId()
					if r.GetVersion() != "" {
						name += " " + r.GetVersion()
					}
				}
				dg := shortDigest(r.GetDigest())
				if a.wideOutput() {
					dg = r.GetDigest()
				}
				if !r.GetDeployed() && !history {
					name += " (not deployed)"
				}
				v := r.GetVerification()
				cells := []string{comp, r.GetKind(), name, dg, r.GetState(), strings.Join(r.GetRules(), ","), v.GetKeyId(), ago(now, v.GetVerifyTime())}
				if a.wideOutput() {
					cells = append(cells, job)
				}
				t.row(cells...)
			}
			return t.flush()
		},
	}
	cmd.Flags().BoolVar(&history, "history", false, "list every verification on record, newest first, instead of what each component deploys")
	cmd.Flags().StringVar(&kind, "kind", "", "list only artifacts of this kind: image, chart, module or plugin")
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions([]string{"image", "chart", "module", "plugin"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
