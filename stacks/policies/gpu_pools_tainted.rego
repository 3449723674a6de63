# GPU nodes are expensive and scarce: only workloads that ask for them should land
# there. EKS adds no taint to GPU nodes, so a GPU node group must declare one. GKE
# taints GPU nodes itself (nvidia.com/gpu=present:NoSchedule) only while the cluster
# also has a pool without GPUs, so a GPU pool without a taint of its own is a warning;
# a spot or preemptible one, whose nodes come and go, is denied.
package terrain.gpu_pools_tainted

import data.terrain.lib

no_schedule_eks(after) if {
	some t in after.taints
	t.effect == "NO_SCHEDULE"
}

no_schedule_gke(after) if {
	some t in after.taints
	endswith(t, ":NoSchedule")
}

deny contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "eks_node_group"
	lib.group_gpus_per_node(c.after) > 0
	not no_schedule_eks(c.after)
	msg := "a GPU node group needs a NO_SCHEDULE taint (e.g. nvidia.com/gpu=true), or every pod may land on its GPU nodes"
}

deny contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "gke_node_pool"
	lib.pool_gpus_per_node(c.after) > 0
	spot_or_preemptible(c.after)
	not no_schedule_gke(c.after)
	msg := "a spot or preemptible GPU pool needs a NoSchedule taint, so only work that tolerates preemption lands there"
}

warn contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "gke_node_pool"
	lib.pool_gpus_per_node(c.after) > 0
	not spot_or_preemptible(c.after)
	not no_schedule_gke(c.after)
	msg := "this GPU pool declares no taint: GKE adds nvidia.com/gpu only while the cluster has a pool without GPUs"
}

spot_or_preemptible(after) if after.spot
spot_or_preemptible(after) if after.preemptible
