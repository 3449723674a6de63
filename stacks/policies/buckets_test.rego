package terrain.buckets

bucket(kind, after) := {"changes": [{"address": sprintf("%s.b", [kind]), "kind": kind, "action": "create", "after": after}]}

closed := {"block_public_acls": true, "ignore_public_acls": true, "block_public_policy": true, "restrict_public_buckets": true}

test_gcs_bucket_without_uniform_access_is_denied if {
	count(deny) == 1 with input as bucket("gcs_bucket", {"uniform_access": false})
}

test_gcs_bucket_with_uniform_access_is_allowed if {
	count(deny) == 0 with input as bucket("gcs_bucket", {"uniform_access": true})
}

test_s3_bucket_open_to_public_policies_is_denied if {
	some d in deny with input as bucket("s3_bucket", {"encryption": {"algorithm": "AES256"}, "public_access_block": object.union(closed, {"block_public_policy": false})})
	contains(d.msg, "block_public_policy")
}

test_s3_bucket_without_encryption_is_denied if {
	count(deny) == 1 with input as bucket("s3_bucket", {"encryption": {"algorithm": ""}, "public_access_block": closed})
}

test_closed_encrypted_s3_bucket_is_allowed if {
	count(deny) == 0 with input as bucket("s3_bucket", {"encryption": {"algorithm": "aws:kms"}, "public_access_block": closed})
}
