# A Job on spot or preemptible capacity loses pods whenever the cloud reclaims a node:
# without retries, the first reclaim fails it. Placement on a spot pool counts as
# spot, as it does for the Job's node selector.
package terrain.spot_jobs_retry

import data.terrain.lib

on_spot(after) if after.spot
on_spot(after) if after.node_pool.spot

deny contains {"address": c.address, "msg": msg} if {
	some c in lib.kept
	c.kind == "kubernetes_job"
	on_spot(c.after)
	c.after.retries < 1
	msg := sprintf("a Job on spot capacity needs retries ≥ 1 (it has %d): a reclaimed node fails it otherwise", [c.after.retries])
}
