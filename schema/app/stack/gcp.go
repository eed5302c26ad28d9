package stack

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// A Google Cloud install stack is a Terraform configuration (one
// main.tf) that the customer applies in a project of theirs, with
// Infrastructure Manager (gcloud infra-manager deployments apply, which
// is Google's deployment service for Terraform in place of Deployment
// Manager) or with terraform itself. Every IAM binding it makes is on
// that project or on one of the stack's own resources: the vendor's
// modes never reach another project or the organisation.

// Defaults of a Google Cloud stack.
const (
	gcpDefaultRegion      = "europe-west1"
	gcpDefaultMachineType = "e2-small"
	gcpDefaultSubnetCIDR  = "10.42.0.0/24"
	gcpImage              = "ubuntu-os-cloud/ubuntu-2404-lts-amd64"
	// GCPProviderVersion is the google provider the configuration asks for.
	GCPProviderVersion = ">= 6.0, < 8.0"
)

// gcpParams are a Google Cloud stack's parameters beside Parameters'
// (by the same names as the other formats', PascalCase; the Terraform
// variable of each is its snake_case, GCPVariable).
var gcpParams = []string{"ProjectId", "Region", "Zone", "EnrollmentToken", "AgentBinaryUrl", "AgentBinarySha256", "PluginsBinaryUrl", "PluginsBinarySha256",
	"MachineType", "NetworkMode", "SubnetCidr", "ExistingNetwork", "ExistingSubnetwork"}

var snakeRE = regexp.MustCompile(`([a-z0-9])([A-Z])`)

// GCPVariable is the Terraform variable of stack parameter name:
// EnableBreakGlass → enable_break_glass, InputAdminEmail →
// input_admin_email.
func GCPVariable(name string) string {
	return strings.ToLower(snakeRE.ReplaceAllString(name, "${1}_${2}"))
}

// gcpVar is a Parameter's variable: for inputs and secrets the name of
// the app config (which may hold digits and capitals) after the prefix.
func gcpVar(p Parameter) string {
	switch p.Kind {
	case "mode":
		return "enable_" + p.Key
	case "input":
		return "input_" + strings.ToLower(p.Key)
	case "secret":
		return "secret_" + strings.ToLower(p.Key)
	}
	return GCPVariable(p.Name)
}

// GCPSecretID is the Secret Manager secret id of a variable in install's
// stack: byoc-INSTALL-input-admin-email.
func GCPSecretID(install, variable string) string {
	return "byoc-" + install + "-" + strings.ReplaceAll(variable, "_", "-")
}

// gcpShort shortens s to at most n characters, ending with a hash of
// the whole when it was longer.
func gcpShort(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return strings.TrimRight(s[:n-5], "-") + "-" + hex.EncodeToString(sum[:])[:4]
}

// gcpAccountID is a service account id (6 to 30 characters): byoc-
// INSTALL-SUFFIX, shortened with a hash of the whole when too long.
func gcpAccountID(install, suffix string) string {
	return gcpShort("byoc-"+install+"-"+suffix, 30)
}

var gcpLabelRE = regexp.MustCompile(`[^a-z0-9_-]`)

// gcpLabel makes s a Google Cloud label key or value: lowercase letters,
// digits, _ and -, at most 63.
func gcpLabel(s string) string {
	return truncate(gcpLabelRE.ReplaceAllString(strings.ToLower(s), "_"), 63)
}

// tfExpr is a Terraform expression written as is.
type tfExpr string

// hclStr quotes s as a Terraform string literal (JSON's escapes are
// HCL's; ${ and %{ are escaped so nothing is interpolated).
func hclStr(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	q := strings.TrimSuffix(b.String(), "\n")
	return strings.NewReplacer("${", "$${", "%{", "%%{").Replace(q)
}

// hclValue writes v (string, bool, int, tfExpr, []any, map[string]any with
// keys in order) as a Terraform expression indented by ind.
func hclValue(v any, ind string) string {
	switch x := v.(type) {
	case tfExpr:
		return string(x)
	case string:
		return hclStr(x)
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case []string:
		var parts []string
		for _, s := range x {
			parts = append(parts, hclStr(s))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		if len(x) == 0 {
			return "{}"
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range x {
				if !yield(k) {
					return
				}
			}
		})
		// As terraform fmt aligns: the = of consecutive one-line
		// attributes line up; a multi-line one stands alone.
		var b strings.Builder
		b.WriteString("{\n")
		var group []string
		flush := func() {
			w := 0
			for _, k := range group {
				w = max(w, len(hclKey(k)))
			}
			for _, k := range group {
				fmt.Fprintf(&b, "%s  %-*s = %s\n", ind, w, hclKey(k), hclValue(x[k], ind+"  "))
			}
			group = group[:0]
		}
		for _, k := range keys {
			v := hclValue(x[k], ind+"  ")
			if !strings.Contains(v, "\n") {
				group = append(group, k)
				continue
			}
			flush()
			fmt.Fprintf(&b, "%s  %s = %s\n", ind, hclKey(k), v)
		}
		flush()
		b.WriteString(ind + "}")
		return b.String()
	}
	panic(fmt.Sprintf("hclValue: %T", v))
}

var hclIdentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func hclKey(k string) string {
	if hclIdentRE.MatchString(k) {
		return k
	}
	return hclStr(k)
}

// GCP returns the install's Terraform configuration (main.tf): the
// agent's service account, which may read the stack's secrets and
// impersonate the modes' accounts and nothing else; a service account
// per permission mode, only while its variable is true, with its
// gcp_roles of permissions.toml (roles/editor when it names none) on the
// project and writer on the install registry; Secret Manager secrets for
// the enrolment token and each customer-provided input and secret
// (sensitive variables); an Artifact Registry repository as the install
// registry; the agent's VM with no external address, in a new network
// with Cloud NAT for egress or an existing subnetwork, behind firewall
// rules that let nothing in and only HTTPS and imsd's port out. The VM's
// metadata holds the stack config (internal/stackconfig, format gcp),
// which a service on the VM rewrites whenever an apply changes it.
func GCP(o Options) ([]byte, error) {
	if err := o.checkWith(gcpParams); err != nil {
		return nil, err
	}
	app := o.App
	if !app.Metadata.Supports(config.CloudGCP) {
		return nil, fmt.Errorf("app %s does not install on gcp: add gcp to app.toml clouds (and the modes' gcp_roles to permissions.toml)", app.Metadata.Name)
	}
	def := func(name, fallback string) string {
		if v, ok := o.Params[name]; ok {
			return v
		}
		return fallback
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	variable := func(name, typ, desc string, dflt any, sensitive bool, validation ...string) {
		w("variable %q {\n  type        = %s\n  description = %s\n", name, typ, hclStr(desc))
		if dflt != nil {
			w("  default     = %s\n", hclValue(dflt, "  "))
		}
		if sensitive {
			w("  sensitive   = true\n")
		}
		if len(validation) == 2 {
			w("  validation {\n    condition     = %s\n    error_message = %s\n  }\n", validation[0], hclStr(validation[1]))
		}
		w("}\n\n")
	}
	// Compute Engine names are at most 63 characters: the longest
	// suffix is 11 (-allow-out, -deny-out).
	prefix := gcpShort("byoc-"+o.Install, 50)
	labels := map[string]any{"byoc-install": gcpLabel(o.Install)}
	for k, v := range o.Labels {
		labels[gcpLabel("byoc-label-"+k)] = gcpLabel(v)
	}

	w("# byoc install stack (Google Cloud): install %s of app %s.\n", o.Install, app.Metadata.Name)
	w("# Apply it with Infrastructure Manager (gcloud infra-manager deployments\n# apply ... --local-source=DIR) or terraform apply, in the project the\n# install lives in. The variables are the stack's parameters.\n\n")
	w("terraform {\n  required_version = \">= 1.5\"\n  required_providers {\n    google = {\n      source  = \"hashicorp/google\"\n      version = %s\n    }\n  }\n}\n\n", hclStr(GCPProviderVersion))
	w("provider \"google\" {\n  project = var.project_id\n  region  = var.region\n}\n\n")

	var project any
	if p := def("ProjectId", ""); p != "" {
		project = p
	}
	variable("project_id", "string", "The project the install's resources go in (its id).", project, false)
	variable("region", "string", "Where the install's resources go.", def("Region", gcpDefaultRegion), false)
	variable("zone", "string", "The agent VM's zone (empty: the region's zone b).", def("Zone", ""), false)
	variable("enrollment_token", "string", fmt.Sprintf("The enrolment token of install %s (the vendor gives it to you): kept in Secret Manager, never shown.", o.Install), nil, true,
		`length(var.enrollment_token) > 0`, "The enrolment token is required (byoc install token gives it).")
	variable("agent_binary_url", "string", "HTTPS URL of the agentd binary (linux/amd64).", def("AgentBinaryUrl", o.AgentURL), false)
	variable("agent_binary_sha256", "string", "SHA-256 of the agentd binary; the VM refuses any other.", def("AgentBinarySha256", o.AgentSHA256), false)
	variable("plugins_binary_url", "string", "HTTPS URL of the byoc-plugins binary (linux/amd64) of the same release as agentd.", def("PluginsBinaryUrl", o.PluginsURL), false)
	variable("plugins_binary_sha256", "string", "SHA-256 of the byoc-plugins binary; the VM refuses any other.", def("PluginsBinarySha256", o.PluginsSHA256), false)
	variable("machine_type", "string", "The agent VM's machine type.", def("MachineType", gcpDefaultMachineType), false)
	variable("network_mode", "string", "create: a new VPC network, subnetwork and Cloud NAT for the agent's egress; existing: existing_network and existing_subnetwork (their egress to the internet is yours to provide).",
		def("NetworkMode", "create"), false, `contains(["create", "existing"], var.network_mode)`, "network_mode is create or existing.")
	variable("subnet_cidr", "string", "The new subnetwork's range (network_mode create).", def("SubnetCidr", gcpDefaultSubnetCIDR), false)
	variable("existing_network", "string", "The agent's VPC network, a name or self link (network_mode existing).", def("ExistingNetwork", ""), false)
	variable("existing_subnetwork", "string", "The agent's subnetwork's self link (network_mode existing).", def("ExistingSubnetwork", ""), false)

	type secretVar struct {
		varName, id, typ string
		optional         bool
	}
	var secretVars []secretVar
	inputs := map[string]any{}
	secrets := map[string]any{}
	modeVars := map[string]string{}
	for _, p := range Parameters(app) {
		v := gcpVar(p)
		if p.Kind == "mode" {
			modeVars[p.Key] = v
			variable(v, "bool", p.Description, def(p.Name, p.Default) == "true", false)
			continue
		}
		typ := "string"
		var validation []string
		if in := p.Input; in != nil {
			switch in.Type {
			case "number":
				typ = "number"
			case "bool":
				typ = "bool"
			case "enum":
				vals := slices.Clone(in.Values)
				if p.Optional {
					vals = append(vals, "")
				}
				validation = []string{fmt.Sprintf("contains(%s, var.%s)", hclValue(vals, ""), v), v + " is one of " + strings.Join(in.Values, ", ") + "."}
			}
		}
		var dflt any
		d := def(p.Name, p.Default)
		switch {
		case typ == "number" && d != "":
			n, err := strconv.Atoi(d)
			if err != nil {
				return nil, fmt.Errorf("%s: default %q is not a whole number (a Terraform number variable)", p.Name, d)
			}
			dflt = n
		case typ == "bool" && d != "":
			dflt = d == "true"
		case d != "" || p.Optional:
			dflt = d
		}
		if !p.Optional && typ == "string" && validation == nil {
			validation = []string{"length(var." + v + ") > 0", v + " is required."}
		}
		variable(v, typ, p.Description, dflt, p.Sensitive, validation...)
		id := GCPSecretID(o.Install, v)
		optional := p.Optional && typ == "string"
		secretVars = append(secretVars, secretVar{v, id, typ, optional})
		from := any(id)
		if optional {
			from = tfExpr(fmt.Sprintf("var.%s == \"\" ? \"\" : %s", v, hclStr(id)))
		}
		src := map[string]any{"gcp_secret": from, "parameter": v}
		if p.Kind == "input" {
			inputs[p.Key] = map[string]any{"sensitive": p.Sensitive, "parameter": v, "from": src}
		} else {
			secrets[p.Key] = src
		}
	}

	// Labels and the APIs the stack and the agent use.
	w("locals {\n  prefix = %s\n  zone   = var.zone != \"\" ? var.zone : \"${var.region}-b\"\n  labels = %s\n}\n\n", hclStr(prefix), hclValue(labels, "  "))
	w("resource \"google_project_service\" \"apis\" {\n  for_each           = toset([\"compute.googleapis.com\", \"iam.googleapis.com\", \"iamcredentials.googleapis.com\", \"secretmanager.googleapis.com\", \"artifactregistry.googleapis.com\"])\n  service            = each.value\n  disable_on_destroy = false\n}\n\n")

	// The agent's own account.
	w("# The agent's own service account: it reads the stack's secrets and\n# impersonates the modes' accounts, nothing else.\n")
	w("resource \"google_service_account\" \"agent\" {\n  account_id   = %s\n  display_name = %s\n  depends_on   = [google_project_service.apis]\n}\n\n",
		hclStr(gcpAccountID(o.Install, "agent")), hclStr(truncate("byoc agent of install "+o.Install, 100)))

	// Secrets.
	secretRes := func(name, id, value, count string) {
		w("resource \"google_secret_manager_secret\" %q {\n", name)
		if count != "" {
			w("  count     = %s\n", count)
		}
		w("  secret_id = %s\n  labels    = local.labels\n  replication {\n    auto {}\n  }\n  depends_on = [google_project_service.apis]\n}\n\n", hclStr(id))
		idx := ""
		if count != "" {
			idx = "[0]"
		}
		w("resource \"google_secret_manager_secret_version\" %q {\n", name)
		if count != "" {
			w("  count       = %s\n", count)
		}
		w("  secret      = google_secret_manager_secret.%s%s.id\n  secret_data = %s\n}\n\n", name, idx, value)
		w("resource \"google_secret_manager_secret_iam_member\" \"%s_agent\" {\n", name)
		if count != "" {
			w("  count     = %s\n", count)
		}
		w("  secret_id = google_secret_manager_secret.%s%s.id\n  role      = \"roles/secretmanager.secretAccessor\"\n  member    = \"serviceAccount:${google_service_account.agent.email}\"\n}\n\n", name, idx)
	}
	w("# Secret Manager: the enrolment token and the customer's inputs and\n# secrets; the agent's account is their only reader.\n")
	secretRes("enrollment_token", GCPSecretID(o.Install, "enrollment_token"), "var.enrollment_token", "")
	for _, s := range secretVars {
		value := "var." + s.varName
		if s.typ != "string" {
			value = "tostring(var." + s.varName + ")"
		}
		count := ""
		if s.optional {
			count = fmt.Sprintf("var.%s == \"\" ? 0 : 1", s.varName)
		}
		secretRes(s.varName, s.id, value, count)
	}

	// The install registry.
	w("# The install's registry.\nresource \"google_artifact_registry_repository\" \"install\" {\n  repository_id = %s\n  location      = var.region\n  format        = \"DOCKER\"\n  description   = %s\n  labels        = local.labels\n  depends_on    = [google_project_service.apis]\n}\n\n",
		hclStr(prefix), hclStr("byoc install "+o.Install+": images and charts copied from the vendor's registry"))

	// A service account per mode, only while its variable is true.
	modes := map[string]any{}
	bgRoles := map[string]any{}
	modeAccount := func(res, accountID, enable, what string, roles []string) tfExpr {
		if len(roles) == 0 {
			roles = []string{config.GCPDefaultRole}
		}
		w("# %s\n", what)
		w("resource \"google_service_account\" %q {\n  count        = var.%s ? 1 : 0\n  account_id   = %s\n  display_name = %s\n  description  = %s\n  depends_on   = [google_project_service.apis]\n}\n\n",
			res, enable, hclStr(accountID), hclStr(truncate("byoc "+o.Install+" "+res, 100)), hclStr(truncate(what, 256)))
		w("resource \"google_project_iam_member\" %q {\n  for_each = var.%s ? toset(%s) : toset([])\n  project  = var.project_id\n  role     = each.value\n  member   = \"serviceAccount:${google_service_account.%s[0].email}\"\n}\n\n",
			res, enable, hclValue(roles, ""), res)
		w("resource \"google_artifact_registry_repository_iam_member\" \"%s_registry\" {\n  count      = var.%s ? 1 : 0\n  location   = google_artifact_registry_repository.install.location\n  repository = google_artifact_registry_repository.install.name\n  role       = \"roles/artifactregistry.writer\"\n  member     = \"serviceAccount:${google_service_account.%s[0].email}\"\n}\n\n",
			res, enable, res)
		w("resource \"google_service_account_iam_member\" \"%s_agent\" {\n  count              = var.%s ? 1 : 0\n  service_account_id = google_service_account.%s[0].name\n  role               = \"roles/iam.serviceAccountTokenCreator\"\n  member             = \"serviceAccount:${google_service_account.agent.email}\"\n}\n\n",
			res, enable, res)
		return tfExpr(fmt.Sprintf("var.%s ? google_service_account.%s[0].email : \"\"", enable, res))
	}
	var modeRes []string
	for _, m := range stackconfig.Modes {
		what := "The " + m + " permission mode's service account"
		var roles []string
		if mr := modeRole(app.Permissions, m); mr != nil {
			if mr.Description != "" {
				what += ": " + mr.Description
			}
			roles = mr.GCPRoles
		}
		res := "mode_" + m
		modeRes = append(modeRes, res)
		enable := modeVars[m]
		email := modeAccount(res, gcpAccountID(o.Install, strings.ReplaceAll(m, "_", "-")), enable, what, roles)
		modes[m] = map[string]any{"enabled": tfExpr("var." + enable), "service_account": email, "name": gcpAccountID(o.Install, strings.ReplaceAll(m, "_", "-")), "parameter": enable}
	}
	for _, r := range app.BreakGlass.Roles {
		var roles []string
		if app.Permissions.BreakGlass != nil {
			roles = app.Permissions.BreakGlass.GCPRoles
		}
		res := "break_glass_" + strings.ToLower(strings.ReplaceAll(r.Name, "-", "_"))
		modeRes = append(modeRes, res)
		id := gcpAccountID(o.Install, "bg-"+strings.ToLower(strings.ReplaceAll(r.Name, "_", "-")))
		email := modeAccount(res, id, modeVars["break_glass"], "Break-glass role "+r.Name+": "+r.Description, roles)
		bgRoles[r.Name] = map[string]any{"enabled": tfExpr("var." + modeVars["break_glass"]), "service_account": email, "name": id, "parameter": modeVars["break_glass"]}
	}

	// The network: egress only.
	port := imsPort(o.IMS)
	ports := []string{"443"}
	if port != 443 {
		ports = append(ports, strconv.Itoa(port))
	}
	w("# The network: a new one with Cloud NAT, or the customer's; nothing may\n# connect to the agent, and it reaches out only over HTTPS and imsd's port.\n")
	w("resource \"google_compute_network\" \"agent\" {\n  count                   = var.network_mode == \"create\" ? 1 : 0\n  name                    = \"${local.prefix}-net\"\n  auto_create_subnetworks = false\n  depends_on              = [google_project_service.apis]\n}\n\n")
	w("resource \"google_compute_subnetwork\" \"agent\" {\n  count                    = var.network_mode == \"create\" ? 1 : 0\n  name                     = \"${local.prefix}-agent\"\n  network                  = google_compute_network.agent[0].id\n  region                   = var.region\n  ip_cidr_range            = var.subnet_cidr\n  private_ip_google_access = true\n}\n\n")
	w("resource \"google_compute_router\" \"agent\" {\n  count   = var.network_mode == \"create\" ? 1 : 0\n  name    = \"${local.prefix}-router\"\n  network = google_compute_network.agent[0].id\n  region  = var.region\n}\n\n")
	w("resource \"google_compute_router_nat\" \"agent\" {\n  count                              = var.network_mode == \"create\" ? 1 : 0\n  name                               = \"${local.prefix}-nat\"\n  router                             = google_compute_router.agent[0].name\n  region                             = var.region\n  nat_ip_allocate_option             = \"AUTO_ONLY\"\n  source_subnetwork_ip_ranges_to_nat = \"ALL_SUBNETWORKS_ALL_IP_RANGES\"\n}\n\n")
	w("locals {\n  network    = var.network_mode == \"create\" ? google_compute_network.agent[0].id : var.existing_network\n  subnetwork = var.network_mode == \"create\" ? google_compute_subnetwork.agent[0].id : var.existing_subnetwork\n}\n\n")
	w("resource \"google_compute_firewall\" \"agent_deny_in\" {\n  name          = \"${local.prefix}-deny-in\"\n  network       = local.network\n  direction     = \"INGRESS\"\n  priority      = 100\n  source_ranges = [\"0.0.0.0/0\"]\n  target_tags   = [local.prefix]\n  description   = \"nothing may connect to the agent\"\n  deny {\n    protocol = \"all\"\n  }\n}\n\n")
	w("resource \"google_compute_firewall\" \"agent_allow_out\" {\n  name               = \"${local.prefix}-allow-out\"\n  network            = local.network\n  direction          = \"EGRESS\"\n  priority           = 100\n  destination_ranges = [\"0.0.0.0/0\"]\n  target_tags        = [local.prefix]\n  description        = \"HTTPS: imsd, registries, Google APIs\"\n  allow {\n    protocol = \"tcp\"\n    ports    = %s\n  }\n}\n\n", hclValue(ports, ""))
	w("resource \"google_compute_firewall\" \"agent_deny_out\" {\n  name               = \"${local.prefix}-deny-out\"\n  network            = local.network\n  direction          = \"EGRESS\"\n  priority           = 1000\n  destination_ranges = [\"0.0.0.0/0\"]\n  target_tags        = [local.prefix]\n  deny {\n    protocol = \"all\"\n  }\n}\n\n")

	// The stack config the VM's metadata holds: names, emails and
	// switches, never a secret's value.
	sc := map[string]any{
		"version":    stackconfig.Version,
		"format":     stackconfig.FormatGCP,
		"stack":      tfExpr("local.prefix"),
		"install":    o.Install,
		"ims":        o.IMS,
		"ims_key_id": o.IMSKeyID,
		"gcp": map[string]any{"project": tfExpr("var.project_id"), "region": tfExpr("var.region"),
			"agent_service_account": tfExpr("google_service_account.agent.email")},
		"enroll_token": map[string]any{"gcp_secret": GCPSecretID(o.Install, "enrollment_token"), "parameter": "enrollment_token"},
		"modes":        modes,
		"registry":     tfExpr(`"${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.install.repository_id}"`),
		"outputs": map[string]any{
			"Registry":   tfExpr(`"${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.install.repository_id}"`),
			"Subnetwork": tfExpr("local.subnetwork"),
			"Zone":       tfExpr("local.zone")},
	}
	if usesKubernetes(app) {
		sc["kubernetes"] = true
	}
	if len(bgRoles) > 0 {
		sc["break_glass_roles"] = bgRoles
	}
	if len(inputs) > 0 {
		sc["inputs"] = inputs
	}
	if len(secrets) > 0 {
		sc["secrets"] = secrets
	}
	w("locals {\n  # The agent's stack config (internal/stackconfig, format gcp).\n  stack_config = %s\n}\n\n", hclValue(sc, "  "))

	// The startup script (every boot): install agentd and byoc-plugins,
	// then a service that keeps /etc/byoc/stack.json equal to the
	// metadata's byoc-stack-config, restarting agentd when an apply
	// changes it (a mode turned on or off), so the VM is never replaced
	// and keeps its enrolment.
	script := strings.Join([]string{
		"#!/bin/bash",
		"# byoc install stack (Google Cloud): installs agentd and byoc-plugins beside",
		"# it, and byoc-stack-sync, which writes its stack config from the VM's",
		"# metadata (byoc-stack-config) and restarts agentd when it changes.",
		"set -euo pipefail",
		"install -d -m 0700 /etc/byoc /var/lib/agentd",
		"md() { curl -fsS -H 'Metadata-Flavor: Google' \"http://metadata.google.internal/computeMetadata/v1/instance/attributes/$1\"; }",
		"download() {",
		"  curl -fsSL --proto '=https' --retry 5 -o \"/usr/local/bin/$1.download\" \"$(md \"$2\")\"",
		"  echo \"$(md \"$3\")  /usr/local/bin/$1.download\" | sha256sum -c -",
		"  install -m 0755 \"/usr/local/bin/$1.download\" \"/usr/local/bin/$1\"",
		"  rm -f \"/usr/local/bin/$1.download\"",
		"}",
		"[ -x /usr/local/bin/agentd ] || download agentd byoc-agent-url byoc-agent-sha256",
		"[ -x /usr/local/bin/byoc-plugins ] || download byoc-plugins byoc-plugins-url byoc-plugins-sha256",
		"cat > /usr/local/bin/byoc-stack-sync <<'BYOC_SYNC'",
		"#!/bin/bash",
		"set -uo pipefail",
		"umask 077",
		"url=http://metadata.google.internal/computeMetadata/v1/instance/attributes/byoc-stack-config",
		"etag=0",
		"while true; do",
		"  if curl -fsS -D /run/byoc-stack.headers -o /run/byoc-stack.json -H 'Metadata-Flavor: Google' \"$url?wait_for_change=true&last_etag=$etag\"; then",
		"    etag=$(awk 'tolower($1)==\"etag:\" {print $2}' /run/byoc-stack.headers | tr -d '\\r')",
		"    if ! cmp -s /run/byoc-stack.json /etc/byoc/stack.json; then",
		"      install -m 0600 /run/byoc-stack.json /etc/byoc/stack.json",
		"      systemctl restart agentd",
		"    fi",
		"  else",
		"    sleep 10",
		"  fi",
		"done",
		"BYOC_SYNC",
		"chmod 0755 /usr/local/bin/byoc-stack-sync",
		"umask 077",
		"md byoc-stack-config > /etc/byoc/stack.json",
		"cat > /etc/systemd/system/agentd.service <<'BYOC_UNIT'",
		"[Unit]",
		"Description=byoc agent (install " + o.Install + ")",
		"After=network-online.target",
		"Wants=network-online.target",
		"[Service]",
		"ExecStart=/usr/local/bin/agentd --stack-config /etc/byoc/stack.json --state-dir /var/lib/agentd",
		"Restart=always",
		"RestartSec=5",
		"[Install]",
		"WantedBy=multi-user.target",
		"BYOC_UNIT",
		"cat > /etc/systemd/system/byoc-stack-sync.service <<'BYOC_UNIT'",
		"[Unit]",
		"Description=byoc: keep the agent's stack config equal to the VM's metadata",
		"[Service]",
		"ExecStart=/usr/local/bin/byoc-stack-sync",
		"Restart=always",
		"[Install]",
		"WantedBy=multi-user.target",
		"BYOC_UNIT",
		"# IAM bindings take a minute or two to apply everywhere.",
		"for i in $(seq 1 20); do",
		"  if /usr/local/bin/agentd preflight --stack-config /etc/byoc/stack.json --state-dir /var/lib/agentd > /var/log/agentd-preflight.txt 2>&1; then break; fi",
		"  sleep 30",
		"done",
		"systemctl daemon-reload",
		"systemctl enable --now byoc-stack-sync agentd",
		""}, "\n")

	w("# The agent's VM: no external address, Shielded VM, its own service\n# account; the stack config and the binaries' addresses in its metadata.\n")
	w("resource \"google_compute_instance\" \"agent\" {\n  name         = \"${local.prefix}-agent\"\n  machine_type = var.machine_type\n  zone         = local.zone\n  tags         = [local.prefix]\n  labels       = local.labels\n\n")
	w("  boot_disk {\n    initialize_params {\n      image = %s\n      size  = 30\n      type  = \"pd-balanced\"\n    }\n  }\n\n", hclStr(gcpImage))
	w("  network_interface {\n    subnetwork = local.subnetwork\n  }\n\n")
	w("  service_account {\n    email  = google_service_account.agent.email\n    scopes = [\"cloud-platform\"]\n  }\n\n")
	w("  shielded_instance_config {\n    enable_secure_boot          = true\n    enable_vtpm                 = true\n    enable_integrity_monitoring = true\n  }\n\n")
	w("  metadata = {\n    enable-oslogin         = \"TRUE\"\n    block-project-ssh-keys = \"TRUE\"\n    byoc-agent-url         = var.agent_binary_url\n    byoc-agent-sha256      = var.agent_binary_sha256\n    byoc-plugins-url       = var.plugins_binary_url\n    byoc-plugins-sha256    = var.plugins_binary_sha256\n    byoc-stack-config      = jsonencode(local.stack_config)\n    startup-script         = %s\n  }\n\n", tfExpr("local.startup_script"))
	deps := []string{"google_secret_manager_secret_version.enrollment_token", "google_secret_manager_secret_iam_member.enrollment_token_agent"}
	for _, s := range secretVars {
		deps = append(deps, "google_secret_manager_secret_version."+s.varName, "google_secret_manager_secret_iam_member."+s.varName+"_agent")
	}
	for _, r := range modeRes {
		deps = append(deps, "google_service_account_iam_member."+r+"_agent", "google_project_iam_member."+r)
	}
	w("  depends_on = [\n")
	for _, d := range deps {
		w("    %s,\n", d)
	}
	w("  ]\n}\n\n")
	w("locals {\n  startup_script = %s\n}\n\n", heredoc(script))

	out := func(name, desc, value string) {
		w("output %q {\n  description = %s\n  value       = %s\n}\n\n", name, hclStr(desc), value)
	}
	out("agent_service_account", "The agent's own service account.", "google_service_account.agent.email")
	for _, m := range stackconfig.Modes {
		out(m+"_service_account", "The "+m+" mode's service account (empty while it is turned off).", string(modes[m].(map[string]any)["service_account"].(tfExpr)))
	}
	out("registry", "The install's registry (Artifact Registry).", `"${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.install.repository_id}"`)
	out("vm_name", "The agent's VM.", "google_compute_instance.agent.name")
	out("subnetwork", "The agent's subnetwork.", "local.subnetwork")
	return []byte(strings.TrimRight(b.String(), "\n") + "\n"), nil
}

// heredoc writes s as a Terraform heredoc string (s ends with a newline,
// and ${ and %{ are escaped).
func heredoc(s string) string {
	s = strings.NewReplacer("${", "$${", "%{", "%%{").Replace(s)
	return "<<-BYOC_SCRIPT\n" + s + "BYOC_SCRIPT"
}
