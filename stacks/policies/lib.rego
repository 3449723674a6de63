# Helpers the guardrails share: which changes a plan makes or keeps, and what a node
# pool or node group runs (GPUs per node, at the most).
package terrain.lib

# Every resource the plan leaves in place: created, updated, replaced or unchanged.
kept contains c if {
	some c in input.changes
	c.action != "delete"
}

# GKE machine types that come with their GPUs (the accelerator is part of the type).
builtin_gpus := {
	"g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1, "g2-standard-16": 1,
	"g2-standard-24": 2, "g2-standard-32": 1, "g2-standard-48": 4, "g2-standard-96": 8,
	"a2-highgpu-1g": 1, "a2-highgpu-2g": 2, "a2-highgpu-4g": 4, "a2-highgpu-8g": 8,
	"a2-megagpu-16g": 16, "a2-ultragpu-1g": 1, "a2-ultragpu-2g": 2, "a2-ultragpu-4g": 4,
	"a2-ultragpu-8g": 8, "a3-highgpu-1g": 1, "a3-highgpu-2g": 2, "a3-highgpu-4g": 4,
	"a3-highgpu-8g": 8, "a3-megagpu-8g": 8,
}

# EC2 GPU instance families and the GPUs of their sizes (unlisted sizes: 1).
gpu_family(t) if regex.match(`^(g4dn|g4ad|g5|g5g|g6|g6e|gr6|p3|p3dn|p4d|p4de|p5|p5e|p5en)\.`, t)

ec2_gpus := {
	"g4dn.12xlarge": 4, "g4dn.metal": 8, "g5.12xlarge": 4, "g5.24xlarge": 4,
	"g5.48xlarge": 8, "g6.12xlarge": 4, "g6.24xlarge": 4, "g6.48xlarge": 8,
	"g6e.12xlarge": 4, "g6e.24xlarge": 4, "g6e.48xlarge": 8, "p3.8xlarge": 4,
	"p3.16xlarge": 8, "p3dn.24xlarge": 8, "p4d.24xlarge": 8, "p4de.24xlarge": 8,
	"p5.48xlarge": 8, "p5e.48xlarge": 8, "p5en.48xlarge": 8,
}

# GPUs on each node of a GKE pool.
pool_gpus_per_node(after) := after.gpu.count if after.gpu.count

else := builtin_gpus[after.machine_type] if builtin_gpus[after.machine_type]

else := 0

# Nodes of a GKE pool at the most.
pool_max_nodes(after) := after.autoscaling.max if after.autoscaling.max

else := after.node_count if after.node_count

else := 0

# GPUs on each node of an EKS node group: its largest instance type's.
group_gpu_counts(after) := [n |
	some t in after.instance_types
	gpu_family(t)
	n := object.get(ec2_gpus, t, 1)
]

group_gpus_per_node(after) := max(group_gpu_counts(after)) if count(group_gpu_counts(after)) > 0

else := 0

# GPUs a resource can hold at the most; 0 for what runs no GPU nodes.
max_gpus(c) := pool_gpus_per_node(c.after) * pool_max_nodes(c.after) if c.kind == "gke_node_pool"

else := group_gpus_per_node(c.after) * c.after.scaling.max if c.kind == "eks_node_group"

else := 0
