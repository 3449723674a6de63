# A workload's identity gets what the workload needs, never the project: Owner or Editor
# granted to a Kubernetes service account (or any Workload Identity principal) hands
# every pod that runs as it the keys to the whole project, including the clusters it
# runs on.
package terrain.workload_identity_least_privilege

import data.terrain.lib

basic_roles := {"roles/owner", "roles/editor"}

workload(after) if after.kubernetes_service_account.name

workload(after) if contains(after.member, ".svc.id.goog")

deny contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "gcp_iam_member"
	c.after.role in basic_roles
	workload(c.after)
	msg := sprintf("%s to a workload identity gives its pods the whole project; grant the predefined roles it needs (roles/storage.objectUser on its bucket, …)", [c.after.role])
}
