# In maintenance mode (day-2 deploys), no new IAM resources and no deletes.
#
# A customer policy: copy it into the agent's --policy-dir. Provision and
# deprovision jobs are not restricted by it; a break-glass job neither.
package byoc.examples.maintenance

# iam_address matches Terraform addresses of IAM resources
# (aws_iam_role.x, module.m.aws_iam_policy.y[0], google_project_iam_member.z,
# azurerm_role_assignment.w) and Kubernetes RBAC objects as the helm type
# names them (Kind/namespace/name).
iam_address(addr) if regex.match(`(^|\.)(aws_iam_|google_project_iam_|google_service_account|azurerm_role_)[a-z_]*\.`, addr)

iam_address(addr) if regex.match(`^(ServiceAccount|Role|ClusterRole|RoleBinding|ClusterRoleBinding)/`, addr)

deny contains msg if {
	input.mode == "maintenance"
	some c in input.changes
	c.action in {"delete", "replace"}
	msg := sprintf("maintenance mode: %s would be deleted (%s); deletes need provision or deprovision mode", [c.address, c.action])
}

deny contains msg if {
	input.mode == "maintenance"
	some c in input.changes
	c.action in {"create", "replace"}
	iam_address(c.address)
	msg := sprintf("maintenance mode: %s is a new IAM resource; IAM changes need provision mode", [c.address])
}
