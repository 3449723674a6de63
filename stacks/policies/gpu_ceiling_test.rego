package terrain.gpu_ceiling

pools(n) := {"changes": [{"address": sprintf("gke_node_pool.p%d", [i]), "kind": "gke_node_pool", "action": "create", "after": {"machine_type": "n1-standard-8", "gpu": {"type": "nvidia-tesla-t4", "count": 4}, "autoscaling": {"min": 0, "max": 4}}} | some i in numbers.range(1, n)]}

test_two_pools_of_16_gpus_fit if {
	count(deny) == 0 with input as pools(2)
}

test_three_pools_of_16_gpus_are_over if {
	some d in deny with input as pools(3)
	startswith(d, "the stack can reach 48 GPUs, over its ceiling of 32")
}

test_node_groups_count_their_largest_instance_type if {
	lib_gpus := data.terrain.lib.max_gpus({"kind": "eks_node_group", "after": {"instance_types": ["g5.xlarge", "g5.12xlarge"], "scaling": {"max": 3}}})
	lib_gpus == 12
}

test_an_expensive_stack_is_a_warning if {
	count(warn) == 1 with input as {"changes": [], "cost": {"after_hourly_max": 80.5}}
}
