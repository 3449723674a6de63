package terrain.gpu_pools_tainted

pool(after) := {"changes": [{"address": "gke_node_pool.gpu", "kind": "gke_node_pool", "action": "create", "after": after}]}

group(after) := {"changes": [{"address": "eks_node_group.gpu", "kind": "eks_node_group", "action": "create", "after": after}]}

test_untainted_spot_gpu_pool_is_denied if {
	some d in deny with input as pool({"machine_type": "n1-standard-8", "gpu": {"type": "nvidia-tesla-t4", "count": 1}, "spot": true, "taints": []})
	d.address == "gke_node_pool.gpu"
}

test_tainted_spot_gpu_pool_is_allowed if {
	count(deny) == 0 with input as pool({"machine_type": "n1-standard-8", "gpu": {"type": "nvidia-tesla-t4", "count": 1}, "spot": true, "taints": ["spot=true:NoSchedule"]})
}

test_builtin_gpus_count_as_gpus if {
	some d in deny with input as pool({"machine_type": "g2-standard-24", "preemptible": true, "taints": []})
	d.address == "gke_node_pool.gpu"
}

test_untainted_on_demand_gpu_pool_is_a_warning if {
	count(deny) == 0 with input as pool({"machine_type": "n1-standard-8", "gpu": {"type": "nvidia-tesla-t4", "count": 1}, "taints": []})
	count(warn) == 1 with input as pool({"machine_type": "n1-standard-8", "gpu": {"type": "nvidia-tesla-t4", "count": 1}, "taints": []})
}

test_cpu_pools_are_left_alone if {
	count(deny) == 0 with input as pool({"machine_type": "e2-standard-8", "spot": true, "taints": []})
	count(warn) == 0 with input as pool({"machine_type": "e2-standard-8", "spot": true, "taints": []})
}

test_untainted_gpu_node_group_is_denied if {
	some d in deny with input as group({"instance_types": ["g5.xlarge"], "scaling": {"min": 0, "max": 2}, "taints": []})
	d.address == "eks_node_group.gpu"
}

test_tainted_gpu_node_group_is_allowed if {
	count(deny) == 0 with input as group({"instance_types": ["g5.xlarge"], "scaling": {"min": 0, "max": 2}, "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]})
}

test_a_deleted_pool_is_not_judged if {
	count(deny) == 0 with input as {"changes": [{"address": "gke_node_pool.gpu", "kind": "gke_node_pool", "action": "delete", "after": null}]}
}
