// godist.h: the types of godist's C ABI, shared by every exported function
// in libgodist.h (which includes this file). python/godist/_lib.py declares
// the same structs with ctypes and compares their layout with
// godist_abi_layout when it loads the library.
#ifndef GODIST_H
#define GODIST_H

#include <stdint.h>

// Flags of an op (godist_op.flags). Without GODIST_ASYNC the op is
// synchronous: it may run on the caller's thread, and if it completes
// during the call the call returns its outcome and no work handle.
#define GODIST_ASYNC 1  // the caller waits later: a work handle, pushed to godist_wait_any once watched
#define GODIST_CUDA 2   // the buffers are CUDA memory on device: enqueued on stream, always a work handle (capi/device.go)
#define GODIST_FLAGS 3  // every flag defined

// godist_buf describes caller-owned memory (usually a tensor's storage):
// data may be NULL only when nbytes is 0.
typedef struct godist_buf {
	void *data;
	int64_t nbytes;
} godist_buf;

// godist_op carries the arguments of one call: every collective and
// point-to-point entry point (godist_allreduce, ...) and godist_work_wait
// take a pointer to one. Each op reads the fields its comment names and
// ignores the others, so a caller may keep one block per thread and
// refill only what an op reads. The call writes work and source (and, on
// failure, the error buffer).
//
// Buffers: buf is the op's buffer (in place, or its input) and out its
// output. Ops with one buffer per rank take a list (ins, nins; outs,
// nouts); allgather, reduce_scatter and alltoall given no list (n 0) split
// buf or out into as many equal parts as the group has ranks instead, as
// all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single
// without split sizes do.
typedef struct godist_op {
	uint64_t pg;             // process group handle
	godist_buf buf;          // allreduce, broadcast, reduce, send, recv: the buffer; allgather, gather, reduce_scatter, alltoall: the input
	int64_t timeout_ms;      // <= 0: the group's timeout; godist_work_wait: how long to wait (0 polls)
	int32_t flags;           // GODIST_* flags
	int32_t dtype;           // every collective: the element type (python/godist/_types.py); -1: plain bytes (not allreduce, reduce, reduce_scatter)
	int32_t reduce_op;       // the same ops: the reduction (c10d's RedOpType numbering)
	int32_t root;            // broadcast, reduce, gather, scatter: the root rank
	int32_t peer;            // send: the destination; recv: the source, -1 for any
	int32_t wait_all;        // monitored_barrier: name every late rank, not only the first
	int64_t tag;             // send, recv
	double factor;           // reduce_op PREMUL_SUM: the factor
	godist_buf out;          // allgather, reduce_scatter, alltoall (no list): the output; scatter: the output
	const godist_buf *ins;   // reduce_scatter, alltoall: one input per rank; scatter: the root's inputs
	const godist_buf *outs;  // allgather, alltoall: one output per rank; gather: the root's outputs
	int32_t nins;
	int32_t nouts;
	uint64_t work;           // out: the work's handle, 0 when none; godist_work_wait: in, the handle
	int32_t source;          // out (godist_work_wait): a receive's sender, -1 for other ops
	int32_t errlen;          // the error buffer's size
	char *errbuf;            // the error buffer (godist_error, then the message)
	uint64_t stream;         // GODIST_CUDA: the caller's current CUDA stream (cudaStream_t)
	int32_t device;          // GODIST_CUDA: the CUDA device ordinal of the buffers
	int32_t op_code;         // godist_device_batch: the block's op (GODIST_OP_*)
	const char *detail;      // collectives: the caller's description of its tensors (TORCH_DISTRIBUTED_DEBUG=DETAIL), NUL-terminated; NULL: none
} godist_op;

// godist_op.op_code values.
#define GODIST_OP_ALLREDUCE 0
#define GODIST_OP_BROADCAST 1
#define GODIST_OP_REDUCE 2
#define GODIST_OP_ALLGATHER 3
#define GODIST_OP_GATHER 4
#define GODIST_OP_REDUCE_SCATTER 5
#define GODIST_OP_SCATTER 6
#define GODIST_OP_ALLTOALL 7
#define GODIST_OP_SEND 8
#define GODIST_OP_RECV 9

// godist_error is the start of the error buffer (errbuf, errlen) that every
// exported function takes: on failure Go fills it in and writes the
// NUL-terminated message right after it. A buffer of at most
// sizeof(godist_error) bytes receives nothing. Text fields are
// NUL-terminated and may be truncated.
typedef struct godist_error {
	int32_t status;      // the status code the call returned
	int32_t cause;       // what went wrong, finer than the status (capi/errors.go)
	int64_t seq;         // the failed op's sequence number in its group, -1 if not an op
	int32_t peer;        // the rank at fault, -1 if none
	int32_t nmissing;    // ranks that never joined the op (timeouts); the first 64 in missing
	int64_t after_ms;    // the timeout that passed, 0 if none
	int32_t missing[64];
	char op[32];         // the op's name ("allreduce"), "" if not an op
	char group[128];     // the group's name, "" if not an op
} godist_error;

#endif
