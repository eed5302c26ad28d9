package cli

import "github.com/spf13/cobra"

// examples are the Examples of --help (and of the CLI reference) of the
// commands that do not set their own, by command path. TestEveryCommandHasExamples
// fails on a command a person runs that has none.
var examples = map[string]string{
	"byoc": `  byoc                                  # open the console
  byoc --context prod install list      # one command against another context
  byoc job list -o yaml                 # any read as YAML (or json, name, jsonpath=, go-template=)`,

	"byoc whoami": `  byoc whoami
  byoc whoami --context prod -o json`,
	"byoc auth whoami": `  byoc auth whoami                      # who you are, your roles and where they come from
  byoc auth whoami -o json`,
	"byoc auth can-i": `  byoc auth can-i provision acme        # exits 0 when allowed, 1 when not
  byoc auth can-i break-glass acme
  byoc auth can-i deploy --app shop
  byoc auth can-i manage                # tokens, plugin types, builds`,
	"byoc token create": `  byoc token create --name ci-deploy --role operator --selector env=staging --expires 30d
  byoc token create --name acme-support --role support --install acme
  byoc token create --name dashboards --role viewer`,
	"byoc login": `  byoc login --server https://imsd.example.com --context prod   # opens a loopback port; sign in in the browser
  byoc login --device                   # a terminal without a browser: enter the printed code anywhere`,
	"byoc token list": `  byoc token list
  byoc token list -o json`,
	"byoc token revoke": `  byoc token revoke ci-deploy
  byoc token revoke tok_wnxcaxmavubt6o56`,

	"byoc component import": `  byoc component import acme settings /etc/shop/app.env   # kvfile: the file's path
  byoc component import acme network 'aws_vpc.main=vpc-0a1b2c'`,

	"byoc context current": `  byoc context current
  byoc context current -o json`,
	"byoc context list":   `  byoc context list`,
	"byoc context remove": `  byoc context remove dev`,
	"byoc context use":    `  byoc context use prod`,

	"byoc release create": `  byoc release create shop --revision 7 --waves "canary:2,10%,50%,100%" --max-failures 5%
  byoc release create shop --revision 7 --selector tier!=canary --respect-windows --pause-between 10m --wait`,
	"byoc release list": `  byoc release list --active
  byoc release list --active --watch    # each release again as its waves move; an ended one as ended
  byoc release list --app shop -o json`,
	"byoc release get": `  byoc release get rel_0123
  byoc release get rel_0123 --wait      # exit 0 succeeded, 1 failed, 3 awaits approval, 4 halted or paused`,
	"byoc release approve":  `  byoc release approve rel_0123 --reason "canaries look good"`,
	"byoc release pause":    `  byoc release pause rel_0123 --reason "error rate up"`,
	"byoc release resume":   `  byoc release resume rel_0123 --reason "accepting the two failures" --wait`,
	"byoc release cancel":   `  byoc release cancel rel_0123 --reason "wrong revision"`,
	"byoc release retry":    `  byoc release retry rel_0123 --reason "disk quota raised" --wait`,
	"byoc release rollback": `  byoc release rollback rel_0123 --reason "checkout errors" --wait`,

	"byoc app create": `  byoc app create shop --description "the shop"`,
	"byoc app get": `  byoc app get shop
  byoc app get shop -o jsonpath='{.id}'`,
	"byoc app init": `  byoc app init ./shop                  # write a commented example config
  byoc app validate ./shop && byoc app push ./shop`,
	"byoc app list": `  byoc app list
  byoc app list --sort-by .createTime -o name`,
	"byoc app push": `  byoc app push ./shop                  # store the next revision and deploy it where it changes
  byoc app push ./shop --no-deploy      # store it only`,
	"byoc app revisions": `  byoc app revisions shop
  byoc app diff shop 3                  # what revision 3 changed`,
	"byoc app validate": `  byoc app validate ./shop
  byoc app validate ./shop --plugin-schema greeting.json -o json`,

	"byoc install create": `  byoc install create shop-acme --app shop --input region=eu-west-1
  byoc install create shop-beta --app shop --token-ttl 1h`,
	"byoc install deprovision": `  byoc install deprovision shop-acme --dry-run   # what would be destroyed
  byoc install deprovision shop-acme --yes --wait`,
	"byoc install drift": `  byoc install drift shop-acme`,
	"byoc agent publish": `  byoc agent publish ./dist --version 1.5.0 --to registry.example.com/byoc/agent --signing-key /var/lib/imsd/signing.key
  byoc agent publish ./dist --version 1.5.0 --to oci:./out/agent --signing-key signing.key -o json`,
	"byoc agent rollout create": `  byoc agent rollout create --release oci://registry.example.com/byoc/agent@sha256:4f1c... --canary 1
  byoc agent rollout create --release oci://registry.example.com/byoc/agent@sha256:4f1c... -l tier!=internal --canary 2 --group-by region --max-failures 5%
  byoc agent rollout create --release oci://registry.example.com/byoc/agent@sha256:4f1c... --waves 1,10%,50%,100% --approve-each-wave --wait`,
	"byoc agent rollout list":    `  byoc agent rollout list --active`,
	"byoc agent rollout get":     `  byoc agent rollout get rel_0123 --wait`,
	"byoc agent rollout approve": `  byoc agent rollout approve rel_0123 --reason "canary confirmed"`,
	"byoc agent rollout pause":   `  byoc agent rollout pause rel_0123 --reason "agents slow to reconnect"`,
	"byoc agent rollout resume":  `  byoc agent rollout resume rel_0123`,
	"byoc agent rollout cancel":  `  byoc agent rollout cancel rel_0123 --reason "bad build"`,
	"byoc agent rollout retry":   `  byoc agent rollout retry rel_0123 --reason "registry back"`,
	"byoc agent update": `  byoc agent update shop-acme --release oci://registry.example.com/byoc/agent@sha256:4f1c...
  byoc agent update -l tier=canary --release oci://registry.example.com/byoc/agent@sha256:4f1c...
  byoc agent update shop-acme --withdraw --reason "crashes on arm64"`,
	"byoc agent revoke": `  byoc agent revoke shop-acme --reason "agent host compromised"`,
	"byoc install get": `  byoc install get shop-acme
  byoc install get shop-acme -o go-template='{{.agent.connected}}'`,
	"byoc install images": `  byoc install images shop-acme`,
	"byoc install artifacts": `  byoc install artifacts shop-acme
  byoc install artifacts shop-acme --kind chart -o json
  byoc install artifacts shop-acme --kind plugin
  byoc install artifacts shop-acme --history --kind module`,
	"byoc install list": `  byoc install list
  byoc install list --app shop -o wide
  byoc install list --watch             # then each install again as it changes
  byoc install list --sort-by .agent.lastSeenTime`,
	"byoc install plan": `  byoc install plan shop-acme                       # the steps a provision would run, and why
  byoc install plan shop-acme --input size=l        # what an input change would redeploy
  byoc install plan --app shop --revision 4 --live  # real plans from every install's agent
  byoc install plan shop-acme --detailed-exitcode   # exit 0 nothing to do, 2 steps to run, 1 an error`,
	"byoc install provision": `  byoc install provision shop-acme --wait
  byoc install provision shop-acme --revision 3`,
	"byoc install stack": `  byoc install stack shop-acme -o stack.yaml
  byoc install stack shop-acme --format local --param EnableBreakGlass=false`,
	"byoc install token": `  byoc install token shop-acme --ttl 1h`,
	"byoc bundle create": `  byoc bundle create shop --install acme -o acme-r7.tar --revision 7
  byoc bundle create shop --install acme -o acme-r8.tar --have-digests acme-inventory.txt   # only what the install lacks`,
	"byoc bundle import-results": `  byoc bundle import-results acme-results.tar`,
	"byoc install update": `  byoc install update shop-acme --input size=l --wait
  byoc install update shop-acme --unset size --no-deploy
  byoc install update shop-acme --require-approval true`,

	"byoc workflow approve": `  byoc workflow approve wf_01hx... --wait`,
	"byoc workflow cancel":  `  byoc workflow cancel wf_01hx... --reason "wrong revision"`,
	"byoc workflow get": `  byoc workflow get wf_01hx...
  byoc workflow get wf_01hx... --wait       # follow it until it ends`,
	"byoc workflow list": `  byoc workflow list --install shop-acme
  byoc workflow list --active -w        # then each workflow again as it changes
  byoc workflow list --active -o name`,
	"byoc workflow retry": `  byoc workflow retry wf_01hx... db --wait`,

	"byoc action list": `  byoc action list shop-acme`,
	"byoc action runs": `  byoc action runs shop-acme
  byoc action runs shop-acme --action migrate --limit 5 -o json`,

	"byoc job cancel": `  byoc job cancel job_01hx... --reason "stuck"`,
	"byoc job get": `  byoc job get job_01hx...
  byoc job get job_01hx... -o jsonpath='{.exitCode}'`,
	"byoc job list": `  byoc job list --install shop-acme --state failed
  byoc job list --watch                 # then each job again as it changes
  byoc job list --sort-by .createTime -o name`,
	"byoc job logs": `  byoc job logs job_01hx...
  byoc job logs -f job_01hx...          # follow it; exit with the job's exit code
  byoc job logs job_01hx... --timestamps --stream-prefix`,

	"byoc plugin get":  `  byoc plugin get greeting -o json`,
	"byoc plugin list": `  byoc plugin list`,
	"byoc plugin publish": `  byoc plugin publish ./byoc-plugin-greeting --name greeting --version 0.2.0 \
      --to registry.example.com/acme/greeting --signing-key /var/lib/imsd/signing.key
  byoc plugin publish ./dist --name greeting --version 0.2.0 --to oci:./out/greeting --signing-key signing.key -o json`,
	"byoc plugin register": `  byoc-plugin-greeting describe | byoc plugin register -
  byoc plugin register greeting.json
  byoc plugin register oci://registry.example.com/acme/greeting@sha256:9a4c...`,
	"byoc plugin remove": `  byoc plugin remove greeting`,

	"byoc breakglass list": `  byoc breakglass list --install shop-acme
  byoc breakglass list --install shop-acme --watch   # see the customer approve or deny`,
	"byoc breakglass request": `  byoc breakglass request shop-acme --role admin --reason "INC-123: disk full" --for 1h`,

	"byoc audit export": `  byoc audit export --install shop-acme --file shop-acme.audit.jsonl
  byoc audit export --vendor --file vendor.audit.jsonl`,
	"byoc audit list": `  byoc audit list --install shop-acme --since 24h
  byoc audit list --since 10m --watch   # then each new event as it is recorded
  byoc audit list --vendor -o json`,
	"byoc audit verify": `  byoc audit verify                     # every chain, read from imsd
  byoc audit verify --file shop-acme.audit.jsonl`,

	"byoc build agent-token": `  byoc build agent-token --ttl 1h`,
	"byoc build list":        `  byoc build list --repo hello`,
	"byoc build package": `  byoc build package ./charts/api --kind helm --repo api-chart --wait
  byoc build package ./terraform/db --kind terraform --repo db-module --tag 1.2.0`,
}

// addExamples sets the Example of cmd and its descendants from examples
// where a command sets none.
func addExamples(cmd *cobra.Command) {
	if ex, ok := examples[cmd.CommandPath()]; ok && cmd.Example == "" {
		cmd.Example = ex
	}
	for _, sub := range cmd.Commands() {
		addExamples(sub)
	}
}
