package terrain.workload_identity_least_privilege

grant(after) := {"changes": [{"address": "gcp_iam_member.g", "kind": "gcp_iam_member", "action": "create", "after": after}]}

ksa := {"cluster": null, "namespace": "kubeflow", "name": "pipeline-runner"}

test_editor_to_a_kubernetes_service_account_is_denied if {
	some d in deny with input as grant({"role": "roles/editor", "kubernetes_service_account": ksa})
	contains(d.msg, "roles/editor")
}

test_owner_to_a_workload_principal_is_denied if {
	count(deny) == 1 with input as grant({"role": "roles/owner", "member": "principal://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p.svc.id.goog/subject/ns/a/sa/b"})
}

test_a_bucket_role_to_a_workload_is_allowed if {
	count(deny) == 0 with input as grant({"role": "roles/storage.objectUser", "kubernetes_service_account": ksa, "bucket": "data"})
}

test_editor_to_a_person_is_left_to_other_rules if {
	count(deny) == 0 with input as grant({"role": "roles/editor", "member": "group:platform@example.com"})
}
