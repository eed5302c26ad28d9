package byoc.policy

deny[msg] {
	r := input.resource_changes[_]
	r.type == "aws_s3_bucket_public_access_block"
	not r.change.after.block_public_acls
	msg := sprintf("%s must block public ACLs", [r.address])
}
