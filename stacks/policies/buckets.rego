# Buckets hold training data, checkpoints and pipeline definitions: none may be public,
# and every S3 bucket is encrypted at rest. A Cloud Storage bucket is always encrypted;
# without uniform bucket-level access its objects' ACLs could still make one public.
package terrain.buckets

import data.terrain.lib

public_access_flags := ["block_public_acls", "ignore_public_acls", "block_public_policy", "restrict_public_buckets"]

deny contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "gcs_bucket"
	c.after.uniform_access == false
	msg := "uniform_access must be true: object ACLs could make objects public"
}

deny contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "s3_bucket"
	some flag in public_access_flags
	c.after.public_access_block[flag] == false
	msg := sprintf("public_access_block.%s must be true: the bucket could be made public", [flag])
}

deny contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "s3_bucket"
	not c.after.encryption.algorithm in {"AES256", "aws:kms", "aws:kms:dsse"}
	msg := "encryption.algorithm must be AES256, aws:kms or aws:kms:dsse"
}
