package terrain.autopilot_no_node_pools

plan(mode) := {"changes": [
	{"address": "gke_cluster.c", "kind": "gke_cluster", "action": "create", "after": {"mode": mode}, "dependencies": []},
	{"address": "gke_node_pool.p", "kind": "gke_node_pool", "action": "create", "after": {"cluster": null}, "dependencies": ["gke_cluster.c"]},
]}

test_pool_on_autopilot_cluster_is_denied if {
	some d in deny with input as plan("autopilot")
	d.address == "gke_node_pool.p"
}

test_pool_on_standard_cluster_is_allowed if {
	count(deny) == 0 with input as plan("standard")
}
