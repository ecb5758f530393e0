// Package libgodist is godist's collective engine: the ProcessGroup (an
// ordered queue of operations with sequence numbers, deadlines and errors
// that name the op, the group and the peer at fault), Work handles, and the
// collective algorithms, each in its own file and each written only against
// the small transport interface in libgodist/transport.
//
// The path of one all_reduce: (*ProcessGroup).AllReduce checks its
// arguments and queues a task (pg.go); the executor goroutine runs queued
// tasks in issue order with a deadline (executor.go); allReduce picks an
// algorithm by size (allreduce.go) and runs it (allreduce_rd.go,
// allreduce_ring.go) through a comm (comm.go), which tags every message
// with the op's sequence number; reduce kernels come from libgodist/reduce.
package libgodist
