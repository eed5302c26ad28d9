package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// An Azure install stack is an ARM template deployed into a resource
// group the customer chose (az deployment group create, or the portal's
// "Deploy to Azure"). Everything it makes is in that resource group, and
// every role assignment it makes is scoped to it (or to one of its
// resources): the vendor's modes can never reach the rest of the
// subscription.

// ARMSchema is the deployment template schema an Azure stack declares.
const ARMSchema = "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#"

// Built-in Azure role definitions the template assigns (their ids are
// the same in every tenant).
const (
	roleAcrPush              = "8311e382-0749-4cb8-b61a-304f252e45ec"
	roleKeyVaultSecretsUser  = "4633458b-17de-408a-b874-0445c86b69e6"
	apiIdentities            = "2024-11-30"
	apiRoleAssignments       = "2022-04-01"
	apiKeyVault              = "2024-11-01"
	apiRegistry              = "2025-11-01"
	apiNetwork               = "2025-05-01"
	apiCompute               = "2026-04-01"
	azureImagePublisher      = "Canonical"
	azureImageOffer          = "ubuntu-24_04-lts"
	azureImageSKU            = "server"
	azureDefaultVMSize       = "Standard_B2s"
	azureDefaultVnetCIDR     = "10.42.0.0/16"
	azureDefaultAdminAccount = "byocadmin"
)

// azureParams are an Azure template's parameters beside Parameters'.
var azureParams = []string{"DeploymentTag", "EnrollmentToken", "AgentBinaryUrl", "AgentBinarySha256", "PluginsBinaryUrl", "PluginsBinarySha256",
	"Location", "VmSize", "AdminUsername", "AdminSshPublicKey", "VnetMode", "VnetCidr", "ExistingSubnetId"}

// expr is an ARM template language expression (without its brackets).
type expr string

func param(name string) expr { return expr("parameters('" + name + "')") }
func variable(name string) expr {
	return expr("variables('" + name + "')")
}

// armLit quotes s as an ARM string literal.
func armLit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// armExpr writes v as an expression: expr as is, strings as literals,
// maps and slices through createObject and createArray.
func armExpr(v any) string {
	switch v := v.(type) {
	case expr:
		return string(v)
	case string:
		return armLit(v)
	case bool:
		if v {
			return "true()"
		}
		return "false()"
	case int:
		return strconv.Itoa(v)
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, armLit(k), armExpr(v[k]))
		}
		return "createObject(" + strings.Join(parts, ", ") + ")"
	case []any:
		var parts []string
		for _, e := range v {
			parts = append(parts, armExpr(e))
		}
		return "createArray(" + strings.Join(parts, ", ") + ")"
	}
	panic(fmt.Sprintf("armExpr: %T", v))
}

// bracket makes an expression a template value.
func bracket(e expr) string { return "[" + string(e) + "]" }

func armConcat(parts ...any) expr {
	var out []string
	for _, p := range parts {
		out = append(out, armExpr(p))
	}
	return expr("concat(" + strings.Join(out, ", ") + ")")
}

// KeyVaultSecretName is the Key Vault secret of a stack parameter:
// InputAdminEmail → input-admin-email.
func KeyVaultSecretName(paramName string) string {
	var b strings.Builder
	for i, r := range paramName {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// DeployToAzureURL is the portal's "Deploy to Azure" link of a template
// served at templateURL (HTTPS, readable by the customer's browser).
func DeployToAzureURL(templateURL string) string {
	return "https://portal.azure.com/#create/Microsoft.Template/uri/" + url.QueryEscape(templateURL)
}

// Azure returns the install's ARM template (JSON), deployed into a
// resource group: a user-assigned managed identity for the agent (which
// may only read the stack's Key Vault) and one per permission mode, only
// while the mode's parameter is true (Contributor on the resource group
// and AcrPush on the install registry); the agent's Linux VM with those
// identities, a NIC and an NSG that lets nothing in and only HTTPS and
// imsd's port out; a new VNet with a NAT gateway for egress, or an
// existing subnet; Key Vault (RBAC) with the enrolment token and each
// customer-provided input and secret, all secure parameters; and an
// Azure Container Registry as the install registry. A CustomScript
// extension, run again on every deployment, writes the stack config
// (internal/stackconfig, format azure) from the deployment's values.
func Azure(o Options) ([]byte, error) {
	b, _, err := azureTemplate(o)
	return b, err
}

// azureTemplate is Azure, and the stack config the VM writes as a tree
// of values and expressions.
func azureTemplate(o Options) ([]byte, map[string]any, error) {
	if err := o.checkWith(azureParams); err != nil {
		return nil, nil, err
	}
	app := o.App
	if !app.Metadata.Supports(config.CloudAzure) {
		return nil, nil, fmt.Errorf("app %s does not install on azure: add azure to app.toml clouds (and the modes' azure_roles to permissions.toml)", app.Metadata.Name)
	}
	def := func(name, fallback string) string {
		if v, ok := o.Params[name]; ok {
			return v
		}
		return fallback
	}
	desc := func(s string) map[string]any { return map[string]any{"description": s} }
	params := map[string]any{}
	vars := map[string]any{}
	var res []any
	outs := map[string]any{}
	// Every resource carries the install and its labels (the billing
	// unit). Azure refuses / in a tag's name, which a label key's prefix
	// has: it becomes _.
	tags := map[string]any{"byoc-install": o.Install}
	for k, v := range o.Labels {
		tags[azureLabelTag(k)] = v
	}

	strParam := func(name, fallback, d string) {
		p := map[string]any{"type": "string", "metadata": desc(d)}
		if v := def(name, fallback); v != "" {
			p["defaultValue"] = v
		}
		params[name] = p
	}
	params["EnrollmentToken"] = map[string]any{"type": "securestring", "minLength": 1,
		"metadata": desc(fmt.Sprintf("The enrolment token of install %s (the vendor gives it to you): kept in the stack's Key Vault, never shown.", o.Install))}
	strParam("AgentBinaryUrl", o.AgentURL, "HTTPS URL of the agentd binary (linux/amd64).")
	strParam("AgentBinarySha256", o.AgentSHA256, "SHA-256 of the agentd binary; the VM refuses any other.")
	strParam("PluginsBinaryUrl", o.PluginsURL, "HTTPS URL of the byoc-plugins binary (linux/amd64) of the same release as agentd, installed beside it.")
	strParam("PluginsBinarySha256", o.PluginsSHA256, "SHA-256 of the byoc-plugins binary; the VM refuses any other.")
	params["Location"] = map[string]any{"type": "string", "defaultValue": def("Location", "[resourceGroup().location]"),
		"metadata": desc("Where the stack's resources go (default: the resource group's location).")}
	strParam("VmSize", azureDefaultVMSize, "The agent VM's size.")
	strParam("AdminUsername", azureDefaultAdminAccount, "The VM's administrator account (SSH key only; the NSG lets no one in: use the serial console or Bastion).")
	strParam("AdminSshPublicKey", "", "The administrator's SSH public key (ssh-ed25519 or ssh-rsa ...).")
	params["VnetMode"] = map[string]any{"type": "string", "defaultValue": def("VnetMode", "create"), "allowedValues": []any{"create", "existing"},
		"metadata": desc("create: a new VNet, subnet and NAT gateway for the agent's egress; existing: ExistingSubnetId (its egress to the internet is yours to provide).")}
	strParam("VnetCidr", azureDefaultVnetCIDR, "The new VNet's address space (VnetMode create); the agent's subnet is its first /24.")
	params["ExistingSubnetId"] = map[string]any{"type": "string", "defaultValue": def("ExistingSubnetId", ""),
		"metadata": desc("The resource id of the agent's subnet (VnetMode existing).")}

	prefix := "byoc-" + o.Install
	vars["prefix"] = prefix
	vars["createVnet"] = "[equals(parameters('VnetMode'), 'create')]"
	vars["vaultName"] = "[concat('byoc', uniqueString(resourceGroup().id, '" + o.Install + "'))]"
	vars["registryName"] = "[concat('byoc', uniqueString(resourceGroup().id, '" + o.Install + "'))]"
	vars["subnetId"] = "[if(variables('createVnet'), resourceId('Microsoft.Network/virtualNetworks/subnets', '" + prefix + "-vnet', 'agent'), parameters('ExistingSubnetId'))]"
	idID := func(name string) expr {
		return expr("resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', " + armLit(name) + ")")
	}
	vaultID := expr("resourceId('Microsoft.KeyVault/vaults', variables('vaultName'))")
	registryID := expr("resourceId('Microsoft.ContainerRegistry/registries', variables('registryName'))")

	// The agent's own identity: it reads Key Vault, nothing else.
	agentID := prefix + "-agent"
	res = append(res, map[string]any{"type": "Microsoft.ManagedIdentity/userAssignedIdentities", "apiVersion": apiIdentities,
		"name": agentID, "location": "[parameters('Location')]", "tags": tags})

	// Key Vault with RBAC: the agent's identity is its only reader.
	res = append(res, map[string]any{"type": "Microsoft.KeyVault/vaults", "apiVersion": apiKeyVault,
		"name": "[variables('vaultName')]", "location": "[parameters('Location')]", "tags": tags,
		"properties": map[string]any{"tenantId": "[subscription().tenantId]", "sku": map[string]any{"family": "A", "name": "standard"},
			"enableRbacAuthorization": true, "enableSoftDelete": true, "softDeleteRetentionInDays": 7, "publicNetworkAccess": "Enabled"}})
	secretRes := func(name string, value expr, cond string) map[string]any {
		r := map[string]any{"type": "Microsoft.KeyVault/vaults/secrets", "apiVersion": apiKeyVault,
			"name": "[concat(variables('vaultName'), '/" + name + "')]", "dependsOn": []any{bracket(vaultID)},
			"properties": map[string]any{"value": bracket(value)}}
		if cond != "" {
			r["condition"] = cond
		}
		return r
	}
	res = append(res, secretRes("enrollment-token", param("EnrollmentToken"), ""))
	vaultReader := map[string]any{"type": "Microsoft.Authorization/roleAssignments", "apiVersion": apiRoleAssignments,
		"name":      "[guid(" + string(vaultID) + ", " + string(idID(agentID)) + ", '" + roleKeyVaultSecretsUser + "')]",
		"scope":     bracket(vaultID),
		"dependsOn": []any{bracket(vaultID), bracket(idID(agentID))},
		"properties": map[string]any{
			"roleDefinitionId": "[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '" + roleKeyVaultSecretsUser + "')]",
			"principalId":      "[reference(" + string(idID(agentID)) + ", '" + apiIdentities + "').principalId]",
			"principalType":    "ServicePrincipal",
			"description":      "byoc agent of install " + o.Install + ": reads the stack's secrets"}}
	res = append(res, vaultReader)

	// The install registry.
	res = append(res, map[string]any{"type": "Microsoft.ContainerRegistry/registries", "apiVersion": apiRegistry,
		"name": "[variables('registryName')]", "location": "[parameters('Location')]", "tags": tags,
		"sku":        map[string]any{"name": "Basic"},
		"properties": map[string]any{"adminUserEnabled": false, "anonymousPullEnabled": false}})

	// Customer-provided inputs and secrets: a secure parameter each, kept
	// in Key Vault; an optional one left empty makes no secret.
	inputs := map[string]any{}
	secrets := map[string]any{}
	var vmDeps []any
	modes := map[string]any{}
	identities := []expr{expr("createObject(" + string(idID(agentID)) + ", createObject())")}
	var modeParams, inputParams, secretParams []string
	for _, p := range Parameters(app) {
		if p.Kind == "mode" {
			modeParams = append(modeParams, p.Name)
			params[p.Name] = map[string]any{"type": "bool", "defaultValue": def(p.Name, p.Default) == "true", "metadata": desc(p.Description)}
			continue
		}
		pd := map[string]any{"type": "string", "metadata": desc(p.Description)}
		value := param(p.Name)
		if p.Kind == "input" {
			inputParams = append(inputParams, p.Name)
		} else {
			secretParams = append(secretParams, p.Name)
		}
		if in := p.Input; in != nil {
			switch in.Type {
			case "number":
				pd["type"] = "int"
				if in.Min != nil {
					pd["minValue"] = int(*in.Min)
				}
				if in.Max != nil {
					pd["maxValue"] = int(*in.Max)
				}
				value = expr("string(" + string(value) + ")")
			case "bool":
				pd["type"] = "bool"
				value = expr("if(" + string(value) + ", 'true', 'false')")
			case "enum":
				var vs []any
				for _, v := range in.Values {
					vs = append(vs, v)
				}
				if p.Optional {
					vs = append(vs, "")
				}
				pd["allowedValues"] = vs
			}
		}
		if p.Sensitive {
			pd["type"] = "securestring"
		}
		d := def(p.Name, p.Default)
		switch {
		case pd["type"] == "int" && d != "":
			n, err := strconv.Atoi(d)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: default %q is not a whole number (an ARM int parameter)", p.Name, d)
			}
			pd["defaultValue"] = n
		case pd["type"] == "bool" && d != "":
			pd["defaultValue"] = d == "true"
		case d != "" || p.Optional:
			pd["defaultValue"] = d
		}
		if !p.Optional && (pd["type"] == "string" || pd["type"] == "securestring") && pd["allowedValues"] == nil {
			pd["minLength"] = 1
		}
		params[p.Name] = pd
		name := KeyVaultSecretName(p.Name)
		cond := ""
		from := any(name)
		if p.Optional && (pd["type"] == "string" || pd["type"] == "securestring") {
			cond = "[not(empty(parameters('" + p.Name + "')))]"
			from = expr("if(empty(" + string(param(p.Name)) + "), '', " + armLit(name) + ")")
		}
		res = append(res, secretRes(name, value, cond))
		vmDeps = append(vmDeps, "[resourceId('Microsoft.KeyVault/vaults/secrets', variables('vaultName'), '"+name+"')]")
		src := map[string]any{"key_vault_secret": from, "parameter": p.Name}
		if p.Kind == "input" {
			inputs[p.Key] = map[string]any{"sensitive": p.Sensitive, "parameter": p.Name, "from": src}
		} else {
			secrets[p.Key] = src
		}
	}

	// A managed identity per permission mode, only while its parameter is
	// true: its azure_roles of permissions.toml (Contributor when it names
	// none) on this resource group and AcrPush on the install registry.
	modeIdentity := func(idName, enable, what string, roles []string) expr {
		cond := "[parameters('" + enable + "')]"
		res = append(res, map[string]any{"type": "Microsoft.ManagedIdentity/userAssignedIdentities", "apiVersion": apiIdentities,
			"condition": cond, "name": idName, "location": "[parameters('Location')]", "tags": tags})
		principal := "[reference(" + string(idID(idName)) + ", '" + apiIdentities + "').principalId]"
		type assignment struct {
			role, scopeName string
			scope           expr
		}
		var ras []assignment
		if len(roles) == 0 {
			roles = []string{"Contributor"}
		}
		for _, r := range roles {
			id, _ := config.AzureRoleID(r) // validated
			ras = append(ras, assignment{id, "", expr("resourceGroup().id")})
		}
		ras = append(ras, assignment{roleAcrPush, "registry", registryID})
		for _, ra := range ras {
			r := map[string]any{"type": "Microsoft.Authorization/roleAssignments", "apiVersion": apiRoleAssignments, "condition": cond,
				"name":      "[guid(" + string(ra.scope) + ", " + string(idID(idName)) + ", '" + ra.role + "')]",
				"dependsOn": []any{bracket(idID(idName))},
				"properties": map[string]any{
					"roleDefinitionId": "[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '" + ra.role + "')]",
					"principalId":      principal, "principalType": "ServicePrincipal",
					"description": truncate("byoc install "+o.Install+": "+what, 1024)}}
			if ra.scopeName != "" {
				r["scope"] = bracket(ra.scope)
				r["dependsOn"] = append(r["dependsOn"].([]any), bracket(ra.scope))
			}
			res = append(res, r)
			raName := "guid(" + string(ra.scope) + ", " + string(idID(idName)) + ", '" + ra.role + "')"
			if ra.scopeName != "" {
				vmDeps = append(vmDeps, "[extensionResourceId("+string(ra.scope)+", 'Microsoft.Authorization/roleAssignments', "+raName+")]")
			} else {
				vmDeps = append(vmDeps, "[resourceId('Microsoft.Authorization/roleAssignments', "+raName+")]")
			}
		}
		identities = append(identities, expr("if("+string(param(enable))+", createObject("+string(idID(idName))+", createObject()), createObject())"))
		return expr("if(" + string(param(enable)) + ", reference(" + string(idID(idName)) + ", '" + apiIdentities + "').clientId, '')")
	}
	for _, m := range stackconfig.Modes {
		idName := prefix + "-" + strings.ReplaceAll(m, "_", "-")
		what := "the " + m + " permission mode"
		var roles []string
		if mr := modeRole(app.Permissions, m); mr != nil {
			if mr.Description != "" {
				what += ": " + mr.Description
			}
			roles = mr.AzureRoles
		}
		clientID := modeIdentity(idName, ModeParameter(m), what, roles)
		modes[m] = map[string]any{"enabled": param(ModeParameter(m)), "client_id": clientID, "name": idName, "parameter": ModeParameter(m)}
		outs[stackconfig.Pascal(m)+"ClientId"] = map[string]any{"type": "string", "value": bracket(clientID)}
	}
	bgRoles := map[string]any{}
	for _, r := range app.BreakGlass.Roles {
		idName := prefix + "-break-glass-" + strings.ReplaceAll(r.Name, "_", "-")
		var roles []string
		if app.Permissions.BreakGlass != nil {
			roles = app.Permissions.BreakGlass.AzureRoles
		}
		clientID := modeIdentity(idName, "EnableBreakGlass", "break-glass role "+r.Name+": "+r.Description, roles)
		bgRoles[r.Name] = map[string]any{"enabled": param("EnableBreakGlass"), "client_id": clientID, "name": idName, "parameter": "EnableBreakGlass"}
	}

	// The network: egress only.
	egress := []any{map[string]any{"name": "AllowHttpsOut", "properties": map[string]any{"priority": 100, "direction": "Outbound", "access": "Allow",
		"protocol": "Tcp", "sourceAddressPrefix": "*", "sourcePortRange": "*", "destinationAddressPrefix": "Internet", "destinationPortRange": "443",
		"description": "HTTPS: imsd, registries, Azure APIs"}}}
	if port := imsPort(o.IMS); port != 443 {
		egress = append(egress, map[string]any{"name": "AllowImsdOut", "properties": map[string]any{"priority": 110, "direction": "Outbound", "access": "Allow",
			"protocol": "Tcp", "sourceAddressPrefix": "*", "sourcePortRange": "*", "destinationAddressPrefix": "Internet", "destinationPortRange": strconv.Itoa(port),
			"description": "imsd"}})
	}
	egress = append(egress,
		map[string]any{"name": "DenyOtherInternetOut", "properties": map[string]any{"priority": 4000, "direction": "Outbound", "access": "Deny",
			"protocol": "*", "sourceAddressPrefix": "*", "sourcePortRange": "*", "destinationAddressPrefix": "Internet", "destinationPortRange": "*"}},
		map[string]any{"name": "DenyAllIn", "properties": map[string]any{"priority": 4096, "direction": "Inbound", "access": "Deny",
			"protocol": "*", "sourceAddressPrefix": "*", "sourcePortRange": "*", "destinationAddressPrefix": "*", "destinationPortRange": "*",
			"description": "nothing may connect to the agent"}})
	nsgID := expr("resourceId('Microsoft.Network/networkSecurityGroups', '" + prefix + "-nsg')")
	res = append(res, map[string]any{"type": "Microsoft.Network/networkSecurityGroups", "apiVersion": apiNetwork,
		"name": prefix + "-nsg", "location": "[parameters('Location')]", "tags": tags,
		"properties": map[string]any{"securityRules": egress}})
	natIPID := expr("resourceId('Microsoft.Network/publicIPAddresses', '" + prefix + "-nat-ip')")
	natID := expr("resourceId('Microsoft.Network/natGateways', '" + prefix + "-nat')")
	res = append(res,
		map[string]any{"type": "Microsoft.Network/publicIPAddresses", "apiVersion": apiNetwork, "condition": "[variables('createVnet')]",
			"name": prefix + "-nat-ip", "location": "[parameters('Location')]", "tags": tags, "sku": map[string]any{"name": "Standard"},
			"properties": map[string]any{"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"}},
		map[string]any{"type": "Microsoft.Network/natGateways", "apiVersion": apiNetwork, "condition": "[variables('createVnet')]",
			"name": prefix + "-nat", "location": "[parameters('Location')]", "tags": tags, "sku": map[string]any{"name": "Standard"},
			"dependsOn":  []any{bracket(natIPID)},
			"properties": map[string]any{"publicIpAddresses": []any{map[string]any{"id": bracket(natIPID)}}}},
		map[string]any{"type": "Microsoft.Network/virtualNetworks", "apiVersion": apiNetwork, "condition": "[variables('createVnet')]",
			"name": prefix + "-vnet", "location": "[parameters('Location')]", "tags": tags,
			"dependsOn": []any{bracket(natID), bracket(nsgID)},
			"properties": map[string]any{"addressSpace": map[string]any{"addressPrefixes": []any{"[parameters('VnetCidr')]"}},
				"subnets": []any{map[string]any{"name": "agent", "properties": map[string]any{
					"addressPrefix":         "[cidrSubnet(parameters('VnetCidr'), 24, 0)]",
					"natGateway":            map[string]any{"id": bracket(natID)},
					"networkSecurityGroup":  map[string]any{"id": bracket(nsgID)},
					"defaultOutboundAccess": false}}}}},
		map[string]any{"type": "Microsoft.Network/networkInterfaces", "apiVersion": apiNetwork,
			"name": prefix + "-nic", "location": "[parameters('Location')]", "tags": tags,
			"dependsOn": []any{bracket(nsgID), "[resourceId('Microsoft.Network/virtualNetworks', '" + prefix + "-vnet')]"},
			"properties": map[string]any{"networkSecurityGroup": map[string]any{"id": bracket(nsgID)},
				"ipConfigurations": []any{map[string]any{"name": "agent", "properties": map[string]any{
					"privateIPAllocationMethod": "Dynamic", "subnet": map[string]any{"id": "[variables('subnetId')]"}}}}}})

	// The stack config the VM's custom data writes: names, client ids
	// and switches, never a secret's value.
	sc := map[string]any{
		"version":    stackconfig.Version,
		"format":     stackconfig.FormatAzure,
		"stack":      expr("deployment().name"),
		"install":    o.Install,
		"ims":        o.IMS,
		"ims_key_id": o.IMSKeyID,
		"azure": map[string]any{
			"tenant_id": expr("subscription().tenantId"), "subscription_id": expr("subscription().subscriptionId"),
			"resource_group":  expr("resourceGroup().name"),
			"agent_client_id": expr("reference(" + string(idID(agentID)) + ", '" + apiIdentities + "').clientId"),
			"key_vault_url":   expr("reference(" + string(vaultID) + ", '" + apiKeyVault + "').vaultUri")},
		"enroll_token": map[string]any{"key_vault_secret": "enrollment-token", "parameter": "EnrollmentToken"},
		"modes":        modes,
		"registry":     expr("reference(" + string(registryID) + ", '" + apiRegistry + "').loginServer"),
		"outputs": map[string]any{
			"RegistryLoginServer": expr("reference(" + string(registryID) + ", '" + apiRegistry + "').loginServer"),
			"KeyVaultUri":         expr("reference(" + string(vaultID) + ", '" + apiKeyVault + "').vaultUri"),
			"SubnetId":            variable("subnetId")},
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
	head := strings.Join([]string{
		"#!/bin/bash",
		"# byoc install stack (Azure): installs agentd and byoc-plugins beside it,",
		"# writes its stack config, runs its preflight checks (waiting out the",
		"# propagation of the role assignments) and starts it under systemd.",
		"set -euo pipefail",
		"install -d -m 0700 /etc/byoc /var/lib/agentd",
		""}, "\n")
	config := "umask 077\ncat > /etc/byoc/stack.json <<'BYOC_STACK_CONFIG'\n"
	download := func(bin, urlParam, sumParam string) []any {
		return []any{"curl -fsSL --proto '=https' --retry 5 -o /usr/local/bin/" + bin + ".download '", param(urlParam), "'\necho '", param(sumParam),
			"  /usr/local/bin/" + bin + ".download' | sha256sum -c -\ninstall -m 0755 /usr/local/bin/" + bin + ".download /usr/local/bin/" + bin + "\nrm -f /usr/local/bin/" + bin + ".download\n"}
	}
	tail := strings.Join([]string{
		"",
		"BYOC_STACK_CONFIG",
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
		"# Role assignments take minutes to reach Key Vault and the identities.",
		"for i in $(seq 1 20); do",
		"  if /usr/local/bin/agentd preflight --stack-config /etc/byoc/stack.json --state-dir /var/lib/agentd > /var/log/agentd-preflight.txt 2>&1; then",
		"    systemctl daemon-reload",
		"    systemctl enable agentd",
		"    systemctl restart agentd",
		"    exit 0",
		"  fi",
		"  sleep 30",
		"done",
		"cat /var/log/agentd-preflight.txt",
		"exit 1",
		""}, "\n")
	script := []any{head}
	script = append(script, download("agentd", "AgentBinaryUrl", "AgentBinarySha256")...)
	script = append(script, download("byoc-plugins", "PluginsBinaryUrl", "PluginsBinarySha256")...)
	script = append(script, config, expr("string("+armExpr(sc)+")"), tail)

	vmDeps = append(vmDeps, "[resourceId('Microsoft.Network/networkInterfaces', '"+prefix+"-nic')]", bracket(registryID),
		"[resourceId('Microsoft.KeyVault/vaults/secrets', variables('vaultName'), 'enrollment-token')]",
		"[extensionResourceId("+string(vaultID)+", 'Microsoft.Authorization/roleAssignments', guid("+string(vaultID)+", "+string(idID(agentID))+", '"+roleKeyVaultSecretsUser+"'))]")
	var idParts []string
	for _, e := range identities {
		idParts = append(idParts, string(e))
	}
	res = append(res, map[string]any{"type": "Microsoft.Compute/virtualMachines", "apiVersion": apiCompute,
		"name": prefix + "-agent", "location": "[parameters('Location')]", "tags": tags,
		"dependsOn": vmDeps,
		"identity":  map[string]any{"type": "UserAssigned", "userAssignedIdentities": "[union(" + strings.Join(idParts, ", ") + ")]"},
		"properties": map[string]any{
			"hardwareProfile": map[string]any{"vmSize": "[parameters('VmSize')]"},
			"storageProfile": map[string]any{
				"imageReference": map[string]any{"publisher": azureImagePublisher, "offer": azureImageOffer, "sku": azureImageSKU, "version": "latest"},
				"osDisk":         map[string]any{"createOption": "FromImage", "diskSizeGB": 30, "managedDisk": map[string]any{"storageAccountType": "StandardSSD_LRS"}}},
			"osProfile": map[string]any{"computerName": truncate(prefix+"-agent", 64), "adminUsername": "[parameters('AdminUsername')]",
				"linuxConfiguration": map[string]any{"disablePasswordAuthentication": true, "ssh": map[string]any{"publicKeys": []any{map[string]any{
					"path": "[concat('/home/', parameters('AdminUsername'), '/.ssh/authorized_keys')]", "keyData": "[parameters('AdminSshPublicKey')]"}}}}},
			"securityProfile": map[string]any{"securityType": "TrustedLaunch", "uefiSettings": map[string]any{"secureBootEnabled": true, "vTpmEnabled": true}},
			"networkProfile":  map[string]any{"networkInterfaces": []any{map[string]any{"id": "[resourceId('Microsoft.Network/networkInterfaces', '" + prefix + "-nic')]"}}}}})

	// The script runs as a CustomScript extension, not custom data: it
	// runs again on every deployment (DeploymentTag), so a redeployment
	// with a mode turned on or off rewrites the stack config and restarts
	// agentd; a failed preflight fails the deployment with its output.
	params["DeploymentTag"] = map[string]any{"type": "string", "defaultValue": "[utcNow()]",
		"metadata": desc("Changes with every deployment (leave the default) so that the agent's VM rewrites its stack config.")}
	res = append(res, map[string]any{"type": "Microsoft.Compute/virtualMachines/extensions", "apiVersion": apiCompute,
		"name": prefix + "-agent/byoc-agent", "location": "[parameters('Location')]", "tags": tags,
		"dependsOn": []any{"[resourceId('Microsoft.Compute/virtualMachines', '" + prefix + "-agent')]"},
		"properties": map[string]any{"publisher": "Microsoft.Azure.Extensions", "type": "CustomScript", "typeHandlerVersion": "2.1",
			"autoUpgradeMinorVersion": true, "forceUpdateTag": "[parameters('DeploymentTag')]",
			"protectedSettings": map[string]any{"script": bracket(expr("base64(" + string(armConcat(script...)) + ")"))}}})

	outs["AgentClientId"] = map[string]any{"type": "string", "value": "[reference(" + string(idID(agentID)) + ", '" + apiIdentities + "').clientId]"}
	outs["RegistryLoginServer"] = map[string]any{"type": "string", "value": "[reference(" + string(registryID) + ", '" + apiRegistry + "').loginServer]"}
	outs["KeyVaultUri"] = map[string]any{"type": "string", "value": "[reference(" + string(vaultID) + ", '" + apiKeyVault + "').vaultUri]"}
	outs["VmName"] = map[string]any{"type": "string", "value": prefix + "-agent"}
	outs["SubnetId"] = map[string]any{"type": "string", "value": "[variables('subnetId')]"}

	tmpl := map[string]any{
		"$schema":        ARMSchema,
		"contentVersion": "1.0.0.0",
		"metadata": map[string]any{"description": truncate(fmt.Sprintf("byoc install stack: install %s of app %s (the agent, a managed identity per permission mode, Key Vault, the install's registry)", o.Install, app.Metadata.Name), 1024),
			"parameterGroups": map[string]any{"permissionModes": modeParams, "inputs": inputParams, "secrets": secretParams}},
		"parameters": params,
		"variables":  vars,
		"resources":  res,
		"outputs":    outs,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(tmpl); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), sc, nil
}

// azureLabelTag is the tag name of install label k on Azure.
func azureLabelTag(k string) string { return "byoc-label-" + strings.ReplaceAll(k, "/", "_") }
