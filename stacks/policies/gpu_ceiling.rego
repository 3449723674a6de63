# A ceiling on the GPUs one stack can reach when every autoscaler is at its maximum
# (node pools: GPUs per node × maximum nodes; node groups: their largest instance
# type's GPUs × maximum size), and a warning when the stack could cost more than a
# round sum an hour at its maximum. Adjust the two numbers to your team's.
package terrain.gpu_ceiling

import data.terrain.lib

max_gpus := 32

warn_hourly_usd := 50

stack_gpus := sum([n | some c in lib.kept; n := lib.max_gpus(c)])

deny contains msg if {
	stack_gpus > max_gpus
	holders := [sprintf("%s (%d)", [c.address, lib.max_gpus(c)]) | some c in lib.kept; lib.max_gpus(c) > 0]
	msg := sprintf("the stack can reach %d GPUs, over its ceiling of %d: %s", [stack_gpus, max_gpus, concat(", ", holders)])
}

warn contains msg if {
	input.cost.after_hourly_max > warn_hourly_usd
	msg := sprintf("at its maximum the stack costs $%.2f/h, over $%d/h", [input.cost.after_hourly_max, warn_hourly_usd])
}
