package config

import (
	"regexp"
	"slices"
	"sort"
)

// The clouds an app can install on (app.toml clouds).
const (
	CloudAWS   = "aws"
	CloudAzure = "azure"
	CloudGCP   = "gcp"
)

// Clouds lists the clouds with an install stack.
var Clouds = []string{CloudAWS, CloudAzure, CloudGCP}

// Supports reports whether the app installs on cloud: app.toml's clouds
// lists it, or it lists none and cloud is aws.
func (m Metadata) Supports(cloud string) bool {
	if len(m.Clouds) == 0 {
		return cloud == CloudAWS
	}
	return slices.Contains(m.Clouds, cloud)
}

// AzureBuiltinRoles are the Azure built-in roles azure_roles may name,
// by name: their role definition ids, the same in every tenant. Others
// are given by id.
var AzureBuiltinRoles = map[string]string{
	"Contributor":                               "b24988ac-6182-42a0-9e5e-1a1e5bab2c3c",
	"Reader":                                    "acdd72a7-3385-48ef-bd42-f606fba81ae7",
	"AcrPush":                                   "8311e382-0749-4cb8-b61a-304f252e45ec",
	"AcrPull":                                   "7f951dda-4ed3-4680-a7ca-43fe172d538d",
	"Network Contributor":                       "4d97b98b-1d4f-4787-a291-c67834d212e7",
	"Virtual Machine Contributor":               "9980e02c-c2be-4d73-94e8-173b1dc7cf3c",
	"Storage Account Contributor":               "17d1049b-9a84-46fb-8f53-869881c3d3ab",
	"Storage Blob Data Contributor":             "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
	"Key Vault Secrets Officer":                 "b86a8fe4-44ce-4948-aee5-eccb2c155cd7",
	"Key Vault Secrets User":                    "4633458b-17de-408a-b874-0445c86b69e6",
	"Azure Kubernetes Service Contributor Role": "ed7f3fbd-7b88-4dd4-9017-9adb7ce333f8",
	"Monitoring Reader":                         "43d0d8ad-25c7-4714-9337-8ba259a9fe05",
}

// AzureRoleNames lists AzureBuiltinRoles' names, sorted.
func AzureRoleNames() []string {
	var out []string
	for n := range AzureBuiltinRoles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// gcpRoleRE is a Google Cloud IAM role: a predefined or basic role
// (roles/NAME) or a custom one (projects/P/roles/NAME,
// organizations/N/roles/NAME).
var gcpRoleRE = regexp.MustCompile(`^(roles|projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/roles|organizations/[0-9]+/roles)/[A-Za-z0-9_.]{3,64}$`)

// IsGCPRole reports whether role is written as a Google Cloud IAM role.
func IsGCPRole(role string) bool { return gcpRoleRE.MatchString(role) }

// GCPDefaultRole is a mode's role when gcp_roles names none.
const GCPDefaultRole = "roles/editor"

var guidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// AzureRoleID is the role definition id of an azure_roles entry (a
// built-in role's name or an id); ok is false for anything else.
func AzureRoleID(role string) (id string, ok bool) {
	if id, ok := AzureBuiltinRoles[role]; ok {
		return id, true
	}
	if guidRE.MatchString(role) {
		return role, true
	}
	return "", false
}
