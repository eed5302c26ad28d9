# A vendor policy: every plan of a terraform component must pass it before
# it is applied (rego v1; input.plan is Terraform's `show -json` of the plan,
# input.changes the changes, input.mode the job's permission mode).
package vendor.buckets

deny contains msg if {
	some r in input.plan.resource_changes
	r.type == "aws_s3_bucket_public_access_block"
	not r.change.after.block_public_acls
	msg := sprintf("%s must block public ACLs", [r.address])
}
