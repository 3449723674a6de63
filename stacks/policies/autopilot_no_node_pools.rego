# GKE Autopilot manages its nodes itself and refuses node pools: a pool on an Autopilot
# cluster fails at apply, after the cluster has been made. This catches it at plan,
# also when the cluster is created by the same stack.
package terrain.autopilot_no_node_pools

import data.terrain.lib

deny contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "gke_node_pool"
	some cluster in lib.kept
	cluster.kind == "gke_cluster"
	cluster.address in c.dependencies
	cluster.after.mode == "autopilot"
	msg := sprintf("%s is an Autopilot cluster, which takes no node pools: ask for GPUs, TPUs or spot in the Jobs' placement instead", [cluster.address])
}
