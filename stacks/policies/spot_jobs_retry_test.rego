package terrain.spot_jobs_retry

job(after) := {"changes": [{"address": "kubernetes_job.train", "kind": "kubernetes_job", "action": "create", "after": after}]}

test_spot_job_without_retries_is_denied if {
	count(deny) == 1 with input as job({"spot": true, "retries": 0})
}

test_job_placed_on_a_spot_pool_without_retries_is_denied if {
	count(deny) == 1 with input as job({"spot": false, "node_pool": {"spot": true}, "retries": 0})
}

test_spot_job_with_retries_is_allowed if {
	count(deny) == 0 with input as job({"spot": true, "retries": 3})
}

test_on_demand_job_without_retries_is_allowed if {
	count(deny) == 0 with input as job({"spot": false, "retries": 0})
}
