package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// CloudFormation templates are JSON objects; these build their intrinsic
// functions.
func ref(name string) any           { return map[string]any{"Ref": name} }
func getAtt(res, attr string) any   { return map[string]any{"Fn::GetAtt": []any{res, attr}} }
func ifc(cond string, a, b any) any { return map[string]any{"Fn::If": []any{cond, a, b}} }
func equals(a, b any) any           { return map[string]any{"Fn::Equals": []any{a, b}} }
func not(c any) any                 { return map[string]any{"Fn::Not": []any{c}} }
func sub(s string, vars map[string]any) any {
	if vars == nil {
		return map[string]any{"Fn::Sub": s}
	}
	return map[string]any{"Fn::Sub": []any{s, vars}}
}

var noValue = ref("AWS::NoValue")

// AMI is the default image of the agent's instance: Amazon Linux 2023,
// through its public SSM parameter.
const AMI = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"

// CloudFormation returns the install's CloudFormation template (JSON).
//
// The enrolment token is never a parameter, output or tag: the customer
// stores it in a Secrets Manager secret and gives its ARN
// (EnrollmentTokenSecretArn). Customer-provided inputs and secrets are
// parameters (NoEcho when sensitive), each kept in a Secrets Manager
// secret of the stack, which the agent reads; the stack config in the
// instance's user data holds only their ARNs.
func CloudFormation(o Options) ([]byte, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	app := o.App
	if !app.Metadata.Supports(config.CloudAWS) {
		return nil, fmt.Errorf("app %s does not install on aws: add aws to app.toml clouds", app.Metadata.Name)
	}
	params := map[string]any{}
	conds := map[string]any{}
	res := map[string]any{}
	outs := map[string]any{}
	def := func(name, fallback string) string {
		if v, ok := o.Params[name]; ok {
			return v
		}
		return fallback
	}
	tags := func(extra ...string) []any {
		t := []any{map[string]any{"Key": "byoc:install", "Value": o.Install}}
		for _, k := range slices.Sorted(maps.Keys(o.Labels)) {
			t = append(t, map[string]any{"Key": labelTagPrefix + k, "Value": o.Labels[k]})
		}
		for i := 0; i+1 < len(extra); i += 2 {
			t = append(t, map[string]any{"Key": extra[i], "Value": extra[i+1]})
		}
		return t
	}

	// The agent and its machine.
	params["EnrollmentTokenSecretArn"] = map[string]any{"Type": "String",
		"Description":           fmt.Sprintf("ARN of a Secrets Manager secret you created holding the enrolment token of install %s (the vendor gives it to you; never paste the token itself here).", o.Install),
		"AllowedPattern":        `^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$`,
		"ConstraintDescription": "a Secrets Manager secret ARN"}
	params["AgentBinaryUrl"] = map[string]any{"Type": "String",
		"Description": "HTTPS URL of the agentd binary (linux/amd64).", "AllowedPattern": `^https://.+$`}
	params["AgentBinarySha256"] = map[string]any{"Type": "String",
		"Description": "SHA-256 of the agentd binary; the instance refuses any other.", "AllowedPattern": `^[0-9a-f]{64}$`}
	// Without a default the customer fills them in.
	if v := def("AgentBinaryUrl", o.AgentURL); v != "" {
		params["AgentBinaryUrl"].(map[string]any)["Default"] = v
	}
	if v := def("AgentBinarySha256", o.AgentSHA256); v != "" {
		params["AgentBinarySha256"].(map[string]any)["Default"] = v
	}
	// byoc-plugins, installed beside agentd, serves the built-in types too
	// heavy for the agent's own process (terraform, image, helm).
	params["PluginsBinaryUrl"] = map[string]any{"Type": "String",
		"Description": "HTTPS URL of the byoc-plugins binary (linux/amd64) of the same release as agentd: the terraform, image and helm types, installed beside agentd.", "AllowedPattern": `^https://.+$`}
	params["PluginsBinarySha256"] = map[string]any{"Type": "String",
		"Description": "SHA-256 of the byoc-plugins binary; the instance refuses any other.", "AllowedPattern": `^[0-9a-f]{64}$`}
	if v := def("PluginsBinaryUrl", o.PluginsURL); v != "" {
		params["PluginsBinaryUrl"].(map[string]any)["Default"] = v
	}
	if v := def("PluginsBinarySha256", o.PluginsSHA256); v != "" {
		params["PluginsBinarySha256"].(map[string]any)["Default"] = v
	}
	params["InstanceType"] = map[string]any{"Type": "String", "Default": def("InstanceType", "t3.small"),
		"Description": "The agent's EC2 instance type."}
	params["AmiId"] = map[string]any{"Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>", "Default": def("AmiId", AMI),
		"Description": "The agent's machine image (Amazon Linux 2023)."}

	// The network: a new VPC, or an existing VPC and subnet.
	params["VpcMode"] = map[string]any{"Type": "String", "Default": def("VpcMode", "create"), "AllowedValues": []any{"create", "existing"},
		"Description": "create: a new VPC with one public subnet for the agent; existing: ExistingVpcId and ExistingSubnetId (the subnet needs a route to the internet or a NAT gateway)."}
	params["VpcCidr"] = map[string]any{"Type": "String", "Default": def("VpcCidr", "10.42.0.0/16"),
		"Description": "The new VPC's CIDR block (VpcMode create).", "AllowedPattern": `^([0-9]{1,3}\.){3}[0-9]{1,3}/(1[6-9]|2[0-8])$`}
	params["ExistingVpcId"] = map[string]any{"Type": "String", "Default": def("ExistingVpcId", ""),
		"Description": "The VPC to use (VpcMode existing).", "AllowedPattern": `^(vpc-[0-9a-f]+)?$`}
	params["ExistingSubnetId"] = map[string]any{"Type": "String", "Default": def("ExistingSubnetId", ""),
		"Description": "The agent's subnet (VpcMode existing).", "AllowedPattern": `^(subnet-[0-9a-f]+)?$`}
	conds["CreateVpc"] = equals(ref("VpcMode"), "create")
	vpcID := ifc("CreateVpc", ref("Vpc"), ref("ExistingVpcId"))
	subnetID := ifc("CreateVpc", ref("PublicSubnet"), ref("ExistingSubnetId"))
	res["Vpc"] = map[string]any{"Type": "AWS::EC2::VPC", "Condition": "CreateVpc", "Properties": map[string]any{
		"CidrBlock": ref("VpcCidr"), "EnableDnsHostnames": true, "EnableDnsSupport": true, "Tags": tags("Name", "byoc-"+o.Install)}}
	res["InternetGateway"] = map[string]any{"Type": "AWS::EC2::InternetGateway", "Condition": "CreateVpc", "Properties": map[string]any{"Tags": tags()}}
	res["InternetGatewayAttachment"] = map[string]any{"Type": "AWS::EC2::VPCGatewayAttachment", "Condition": "CreateVpc", "Properties": map[string]any{
		"VpcId": ref("Vpc"), "InternetGatewayId": ref("InternetGateway")}}
	res["PublicSubnet"] = map[string]any{"Type": "AWS::EC2::Subnet", "Condition": "CreateVpc", "Properties": map[string]any{
		"VpcId":               ref("Vpc"),
		"CidrBlock":           map[string]any{"Fn::Select": []any{0, map[string]any{"Fn::Cidr": []any{ref("VpcCidr"), 4, 8}}}},
		"AvailabilityZone":    map[string]any{"Fn::Select": []any{0, map[string]any{"Fn::GetAZs": ""}}},
		"MapPublicIpOnLaunch": true, "Tags": tags("Name", "byoc-"+o.Install+"-agent")}}
	res["PublicRouteTable"] = map[string]any{"Type": "AWS::EC2::RouteTable", "Condition": "CreateVpc", "Properties": map[string]any{
		"VpcId": ref("Vpc"), "Tags": tags()}}
	res["PublicRoute"] = map[string]any{"Type": "AWS::EC2::Route", "Condition": "CreateVpc", "DependsOn": "InternetGatewayAttachment",
		"Properties": map[string]any{"RouteTableId": ref("PublicRouteTable"), "DestinationCidrBlock": "0.0.0.0/0", "GatewayId": ref("InternetGateway")}}
	res["PublicSubnetRouteTable"] = map[string]any{"Type": "AWS::EC2::SubnetRouteTableAssociation", "Condition": "CreateVpc", "Properties": map[string]any{
		"SubnetId": ref("PublicSubnet"), "RouteTableId": ref("PublicRouteTable")}}

	// Egress only: HTTPS (registries, AWS APIs, the agent's download) and
	// imsd's port; nothing may connect in.
	egress := []any{map[string]any{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "CidrIp": "0.0.0.0/0", "Description": "HTTPS: imsd, registries, AWS APIs"}}
	if port := imsPort(o.IMS); port != 443 {
		egress = append(egress, map[string]any{"IpProtocol": "tcp", "FromPort": port, "ToPort": port, "CidrIp": "0.0.0.0/0", "Description": "imsd"})
	}
	res["AgentSecurityGroup"] = map[string]any{"Type": "AWS::EC2::SecurityGroup", "Properties": map[string]any{
		"GroupDescription":    "byoc agent of install " + o.Install + ": egress only",
		"VpcId":               vpcID,
		"SecurityGroupEgress": egress,
		"Tags":                tags()}}

	// The install's registry: everything that runs is synced here first.
	res["Registry"] = map[string]any{"Type": "AWS::ECR::Repository", "Properties": map[string]any{
		"RepositoryName":             "byoc/" + o.Install,
		"ImageTagMutability":         "IMMUTABLE",
		"ImageScanningConfiguration": map[string]any{"ScanOnPush": true},
		"EncryptionConfiguration":    map[string]any{"EncryptionType": "AES256"},
		"Tags":                       tags()}}

	// Customer-provided inputs and secrets: a parameter each, kept in a
	// secret each (no JSON escaping of values in user data is needed).
	var secretARNs []any
	inputs := map[string]any{}
	secrets := map[string]any{}
	subVars := map[string]any{}
	for _, p := range Parameters(app) {
		switch p.Kind {
		case "mode":
			params[p.Name] = map[string]any{"Type": "String", "Default": def(p.Name, p.Default), "AllowedValues": []any{"true", "false"}, "Description": p.Description}
			conds[stackconfig.Pascal(p.Key)+"Enabled"] = equals(ref(p.Name), "true")
			continue
		case "input", "secret":
		}
		pd := map[string]any{"Type": "String", "Description": p.Description}
		if p.Sensitive {
			pd["NoEcho"] = true
		}
		if p.Input != nil {
			in := p.Input
			switch in.Type {
			case "number":
				pd["Type"] = "Number"
				if in.Min != nil {
					pd["MinValue"] = *in.Min
				}
				if in.Max != nil {
					pd["MaxValue"] = *in.Max
				}
			case "bool":
				pd["AllowedValues"] = []any{"true", "false"}
			case "enum":
				var vs []any
				for _, v := range in.Values {
					vs = append(vs, v)
				}
				pd["AllowedValues"] = vs
			}
			optionalEmpty := p.Optional && p.Default == "" && def(p.Name, "") == ""
			if in.Pattern != "" {
				pd["AllowedPattern"] = in.Pattern
				if optionalEmpty {
					pd["AllowedPattern"] = "(" + in.Pattern + ")?"
				}
			}
			// An optional input may stay empty: unset.
			if vs, ok := pd["AllowedValues"].([]any); ok && optionalEmpty {
				pd["AllowedValues"] = append(vs, "")
			}
		}
		d := def(p.Name, p.Default)
		if d != "" || p.Optional {
			pd["Default"] = d
		}
		if !p.Optional && pd["Type"] == "String" && pd["AllowedValues"] == nil {
			pd["MinLength"] = 1
		}
		params[p.Name] = pd
		resName := p.Name + "Value"
		r := map[string]any{"Type": "AWS::SecretsManager::Secret", "Properties": map[string]any{
			"Description":  fmt.Sprintf("byoc install %s: %s %s, read by the agent", o.Install, p.Kind, p.Key),
			"SecretString": ref(p.Name),
			"Tags":         tags("byoc:"+p.Kind, p.Key)}}
		arn := ref(resName)
		// An empty value is no value: no secret, and the agent reports
		// the input unset.
		if d == "" && p.Optional && pd["Type"] == "String" {
			cond := "Has" + p.Name
			conds[cond] = not(equals(ref(p.Name), ""))
			r["Condition"] = cond
			arn = ifc(cond, ref(resName), "")
			secretARNs = append(secretARNs, ifc(cond, ref(resName), noValue))
		} else {
			secretARNs = append(secretARNs, ref(resName))
		}
		res[resName] = r
		v := "${" + resName + "Arn}"
		subVars[resName+"Arn"] = arn
		if p.Kind == "input" {
			inputs[p.Key] = map[string]any{"sensitive": p.Sensitive, "parameter": p.Name, "from": map[string]any{"secret_arn": v, "parameter": p.Name}}
		} else {
			secrets[p.Key] = map[string]any{"secret_arn": v, "parameter": p.Name}
		}
	}

	// The agent's own role may only read its secrets and assume the mode
	// roles; every change in the account is made with a mode's role.
	res["AgentRole"] = map[string]any{"Type": "AWS::IAM::Role", "Properties": map[string]any{
		"Description": "byoc agent of install " + o.Install + ": assumes the permission mode roles, nothing else",
		"AssumeRolePolicyDocument": policyDoc(map[string]any{"Effect": "Allow", "Action": "sts:AssumeRole",
			"Principal": map[string]any{"Service": "ec2.amazonaws.com"}}),
		"Policies": []any{map[string]any{"PolicyName": "read-stack-secrets", "PolicyDocument": policyDoc(map[string]any{
			"Effect": "Allow", "Action": "secretsmanager:GetSecretValue",
			"Resource": append([]any{ref("EnrollmentTokenSecretArn")}, secretARNs...)})}},
		"Tags": tags()}}
	res["AgentInstanceProfile"] = map[string]any{"Type": "AWS::IAM::InstanceProfile", "Properties": map[string]any{"Roles": []any{ref("AgentRole")}}}

	// A role per permission mode, only while its parameter is true.
	repoARN := getAtt("Registry", "Arn")
	registryAccess := map[string]any{"PolicyName": "install-registry", "PolicyDocument": policyDoc(
		map[string]any{"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
		map[string]any{"Effect": "Allow", "Resource": repoARN, "Action": []any{
			"ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:CompleteLayerUpload", "ecr:DescribeImages",
			"ecr:GetDownloadUrlForLayer", "ecr:InitiateLayerUpload", "ecr:PutImage", "ecr:UploadLayerPart"}})}
	var assumable []any
	modes := map[string]any{}
	var anyMode []any
	for _, m := range stackconfig.Modes {
		name := stackconfig.Pascal(m) + "Role"
		cond := stackconfig.Pascal(m) + "Enabled"
		props := map[string]any{
			// sts:TagSession: the agent passes the install's session tags
			// (the stack config's session_tags).
			"AssumeRolePolicyDocument": policyDoc(map[string]any{"Effect": "Allow", "Action": []any{"sts:AssumeRole", "sts:TagSession"},
				"Principal": map[string]any{"AWS": getAtt("AgentRole", "Arn")}}),
			"MaxSessionDuration": 43200,
			"Policies":           []any{registryAccess},
			"Tags":               tags("byoc:mode", m)}
		desc := "byoc install " + o.Install + ": the " + m + " permission mode"
		if mr := modeRole(app.Permissions, m); mr != nil {
			if mr.Description != "" {
				desc += ": " + mr.Description
			}
			if arns := policyARNs(mr.Policies); len(arns) > 0 {
				props["ManagedPolicyArns"] = arns
			}
			if mr.PermissionsBoundary != "" {
				props["PermissionsBoundary"] = policyARN(mr.PermissionsBoundary)
			}
			docs, err := statements("permissions.toml", m, mr.Statements)
			if err != nil {
				return nil, err
			}
			for i, d := range docs {
				props["Policies"] = append(props["Policies"].([]any), map[string]any{"PolicyName": fmt.Sprintf("%s-%d", m, i+1), "PolicyDocument": d})
			}
		}
		props["Description"] = truncate(desc, 1000)
		res[name] = map[string]any{"Type": "AWS::IAM::Role", "Condition": cond, "Properties": props}
		arn := ifc(cond, getAtt(name, "Arn"), "")
		subVars[name+"Arn"] = arn
		assumable = append(assumable, ifc(cond, getAtt(name, "Arn"), noValue))
		anyMode = append(anyMode, map[string]any{"Condition": cond})
		modes[m] = map[string]any{"enabled": "${" + ModeParameter(m) + "}", "arn": "${" + name + "Arn}", "name": name, "parameter": ModeParameter(m)}
		outs[name+"Arn"] = map[string]any{"Condition": cond, "Description": "The role of the " + m + " permission mode.", "Value": getAtt(name, "Arn")}
	}
	bgRoles := map[string]any{}
	for _, r := range app.BreakGlass.Roles {
		name := "BreakGlass" + stackconfig.Pascal(r.Name) + "Role"
		props := map[string]any{
			"Description": truncate("byoc install "+o.Install+": break-glass role "+r.Name+": "+r.Description, 1000),
			// sts:TagSession: the agent passes the install's session tags
			// (the stack config's session_tags).
			"AssumeRolePolicyDocument": policyDoc(map[string]any{"Effect": "Allow", "Action": []any{"sts:AssumeRole", "sts:TagSession"},
				"Principal": map[string]any{"AWS": getAtt("AgentRole", "Arn")}}),
			"MaxSessionDuration": 43200,
			"Policies":           []any{registryAccess},
			"Tags":               tags("byoc:mode", "break_glass", "byoc:break-glass-role", r.Name)}
		if arns := policyARNs(r.Policies); len(arns) > 0 {
			props["ManagedPolicyArns"] = arns
		}
		res[name] = map[string]any{"Type": "AWS::IAM::Role", "Condition": "BreakGlassEnabled", "Properties": props}
		subVars[name+"Arn"] = ifc("BreakGlassEnabled", getAtt(name, "Arn"), "")
		assumable = append(assumable, ifc("BreakGlassEnabled", getAtt(name, "Arn"), noValue))
		bgRoles[r.Name] = map[string]any{"enabled": "${EnableBreakGlass}", "arn": "${" + name + "Arn}", "name": name, "parameter": "EnableBreakGlass"}
	}
	conds["AnyModeEnabled"] = map[string]any{"Fn::Or": anyMode}
	res["AgentAssumesModeRoles"] = map[string]any{"Type": "AWS::IAM::Policy", "Condition": "AnyModeEnabled", "Properties": map[string]any{
		"PolicyName": "assume-mode-roles",
		"Roles":      []any{ref("AgentRole")},
		"PolicyDocument": policyDoc(map[string]any{"Effect": "Allow", "Action": []any{"sts:AssumeRole", "sts:TagSession"},
			"Resource": assumable})}}

	// The install's name and labels, as STS session tags of every role
	// the agent assumes (the mode roles' trust policies allow
	// sts:TagSession); labels AWS would refuse as tags are left out.
	sessionTags, _ := stackconfig.SessionTags(o.Install, o.Labels)

	// The stack config the agent reads, written by the user data. Only
	// ARNs, names and switches go in it, never a secret's value.
	sc := map[string]any{
		"version":      stackconfig.Version,
		"format":       stackconfig.FormatCloudFormation,
		"stack":        "${AWS::StackName}",
		"install":      o.Install,
		"session_tags": sessionTags,
		"ims":          o.IMS,
		"ims_key_id":   o.IMSKeyID,
		"region":       "${AWS::Region}",
		"enroll_token": map[string]any{"secret_arn": "${EnrollmentTokenSecretArn}", "parameter": "EnrollmentTokenSecretArn"},
		"modes":        modes,
		"registry":     "${Registry.RepositoryUri}",
		"outputs": map[string]any{
			"AgentRoleArn": "${AgentRole.Arn}", "RegistryUri": "${Registry.RepositoryUri}",
			"VpcId": "${VpcIdValue}", "SubnetId": "${SubnetIdValue}", "SecurityGroupId": "${AgentSecurityGroup.GroupId}"},
	}
	if usesKubernetes(o.App) {
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
	subVars["VpcIdValue"] = vpcID
	subVars["SubnetIdValue"] = subnetID
	scJSON, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return nil, err
	}
	// "enabled" is a JSON boolean: the parameter's value unquoted.
	scText := enabledRE.ReplaceAllString(string(scJSON), `"enabled": $${${1}}`)
	userData := strings.Join([]string{
		"#!/bin/bash",
		"# byoc install stack: installs agentd and byoc-plugins beside it (the",
		"# built-in types too heavy for agentd's own process), writes its stack config, runs",
		"# its preflight checks (their result is the instance's creation",
		"# signal) and starts it under systemd.",
		"set -uo pipefail",
		"signal() { /opt/aws/bin/cfn-signal -e \"$1\" --reason \"$2\" --stack '${AWS::StackName}' --resource AgentInstance --region '${AWS::Region}' || true; }",
		"trap 'signal 1 \"user data failed at line $LINENO\"' ERR",
		"set -e",
		"dnf install -y -q aws-cfn-bootstrap",
		"install -d -m 0700 /etc/byoc /var/lib/agentd",
		"curl -fsSL --proto '=https' -o /usr/local/bin/agentd.download '${AgentBinaryUrl}'",
		"echo '${AgentBinarySha256}  /usr/local/bin/agentd.download' | sha256sum -c -",
		"install -m 0755 /usr/local/bin/agentd.download /usr/local/bin/agentd",
		"rm -f /usr/local/bin/agentd.download",
		"curl -fsSL --proto '=https' -o /usr/local/bin/byoc-plugins.download '${PluginsBinaryUrl}'",
		"echo '${PluginsBinarySha256}  /usr/local/bin/byoc-plugins.download' | sha256sum -c -",
		"install -m 0755 /usr/local/bin/byoc-plugins.download /usr/local/bin/byoc-plugins",
		"rm -f /usr/local/bin/byoc-plugins.download",
		"umask 077",
		"cat > /etc/byoc/stack.json <<'BYOC_STACK_CONFIG'",
		scText,
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
		"trap - ERR",
		"if ! /usr/local/bin/agentd preflight --stack-config /etc/byoc/stack.json --state-dir /var/lib/agentd > /var/log/agentd-preflight.txt 2>&1; then",
		"  cat /var/log/agentd-preflight.txt",
		"  signal 1 \"agentd preflight failed: $(grep -m1 FAIL /var/log/agentd-preflight.txt | tr -s ' ' | cut -c1-200)\"",
		"  exit 1",
		"fi",
		"systemctl daemon-reload",
		"systemctl enable --now agentd",
		"signal 0 \"agentd preflight passed; agent started\"",
		"",
	}, "\n")
	res["AgentInstance"] = map[string]any{"Type": "AWS::EC2::Instance",
		"CreationPolicy": map[string]any{"ResourceSignal": map[string]any{"Count": 1, "Timeout": "PT15M"}},
		"Properties": map[string]any{
			"ImageId":            ref("AmiId"),
			"InstanceType":       ref("InstanceType"),
			"IamInstanceProfile": ref("AgentInstanceProfile"),
			"SubnetId":           subnetID,
			"SecurityGroupIds":   []any{ref("AgentSecurityGroup")},
			"MetadataOptions":    map[string]any{"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
			"BlockDeviceMappings": []any{map[string]any{"DeviceName": "/dev/xvda",
				"Ebs": map[string]any{"VolumeSize": 20, "VolumeType": "gp3", "Encrypted": true}}},
			"UserData": map[string]any{"Fn::Base64": sub(userData, subVars)},
			"Tags":     tags("Name", "byoc-agent-"+o.Install),
		}}

	outs["AgentRoleArn"] = map[string]any{"Description": "The agent's own role (it may only assume the mode roles).", "Value": getAtt("AgentRole", "Arn")}
	outs["AgentInstanceId"] = map[string]any{"Description": "The agent's EC2 instance.", "Value": ref("AgentInstance")}
	outs["RegistryUri"] = map[string]any{"Description": "The install's container registry.", "Value": getAtt("Registry", "RepositoryUri")}
	outs["VpcId"] = map[string]any{"Description": "The agent's VPC.", "Value": vpcID}
	outs["SubnetId"] = map[string]any{"Description": "The agent's subnet.", "Value": subnetID}
	outs["SecurityGroupId"] = map[string]any{"Description": "The agent's egress-only security group.", "Value": getAtt("AgentSecurityGroup", "GroupId")}

	var groups []any
	group := func(label string, names ...string) {
		if len(names) > 0 {
			groups = append(groups, map[string]any{"Label": map[string]any{"default": label}, "Parameters": names})
		}
	}
	var modeNames, inputNames, secretNames []string
	for _, p := range Parameters(app) {
		switch p.Kind {
		case "mode":
			modeNames = append(modeNames, p.Name)
		case "input":
			inputNames = append(inputNames, p.Name)
		case "secret":
			secretNames = append(secretNames, p.Name)
		}
	}
	group("Permission modes (your control panel: false removes the mode's role)", modeNames...)
	group("Inputs you provide", inputNames...)
	group("Secrets (kept in Secrets Manager in this account)", secretNames...)
	group("Agent", "EnrollmentTokenSecretArn", "InstanceType", "AmiId", "AgentBinaryUrl", "AgentBinarySha256")
	group("Network", "VpcMode", "VpcCidr", "ExistingVpcId", "ExistingSubnetId")

	tmpl := map[string]any{
		"AWSTemplateFormatVersion": "2010-09-09",
		"Description":              truncate(fmt.Sprintf("byoc install stack: install %s of app %s (the agent, a role per permission mode, the install's registry)", o.Install, app.Metadata.Name), 1024),
		"Metadata":                 map[string]any{"AWS::CloudFormation::Interface": map[string]any{"ParameterGroups": groups}},
		"Parameters":               params,
		"Conditions":               conds,
		"Resources":                res,
		"Outputs":                  outs,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(tmpl); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var enabledRE = regexp.MustCompile(`"enabled": "\$\{(Enable[A-Za-z]+)\}"`)

// policyDoc is an IAM policy document of statements.
func policyDoc(st ...any) map[string]any {
	return map[string]any{"Version": "2012-10-17", "Statement": st}
}

// policyARNs turns managed policies (ARNs or AWS managed policy names)
// into ARNs.
func policyARNs(ps []string) []any {
	var out []any
	for _, p := range ps {
		out = append(out, policyARN(p))
	}
	return out
}

func policyARN(p string) any {
	if strings.HasPrefix(p, "arn:") {
		return p
	}
	return sub("arn:${AWS::Partition}:iam::aws:policy/"+strings.TrimPrefix(p, "/"), nil)
}

// imsPort is the TCP port of imsd's URL.
func imsPort(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 443
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if u.Scheme == "http" {
		return 80
	}
	return 443
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
