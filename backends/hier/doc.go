// Package hier carries the collectives of a group whose ranks span
// several hosts with several ranks on some of them: the ranks of one host
// go through that host's offload (shared memory, backends/shm, reached
// through backend.HostOffloader), and only what must cross hosts goes over
// the group's transport (TCP), split across the host's ranks so that every
// local rank streams its share in parallel.
//
// With H hosts of L ranks each (an even group), all_reduce of n bytes is
//
//	host reduce-scatter (L shards) -> all-reduce of each shard among the
//	ranks with the same local index on every host -> host all-gather
//
// so each host sends 2(H-1)/H of n across its link, the least any
// all_reduce can. reduce_scatter, all_gather and broadcast split the same
// way; barrier goes host, leaders (local index 0), host. Groups whose
// hosts hold different numbers of ranks take the leader path for
// all_reduce and broadcast (host stage, then the hosts' lowest ranks, then
// host again) and leave all_gather and reduce_scatter to the engine's own
// algorithms, whose messages the router still sends through shared memory
// inside a host. all_to_all and point-to-point messages route per peer.
//
// Results are bitwise identical on every rank: the host stages' kernels
// give every rank the same bits (backends/shm), and across hosts each
// chunk's reduction is computed once, in a fixed order (ring), or by every
// rank in host order from the same inputs (small all-reduces), and then
// copied.
//
// One algorithm per file: allreduce.go, broadcast.go, allgather.go,
// reducescatter.go, barrier.go, over the cross-host steps in cross.go.
package hier
