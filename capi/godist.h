// godist.h: the types of godist's C ABI, shared by every exported function
// in libgodist.h (which includes this file). python/godist/_lib.py declares
// the same structs with ctypes and compares their layout with
// godist_abi_layout when it loads the library.
#ifndef GODIST_H
#define GODIST_H

#include <stdint.h>

// Flags of an op (the flags argument of every collective and
// point-to-point call). Without GODIST_ASYNC the op is synchronous: it may
// run on the caller's thread, and if it completes during the call the call
// returns its outcome and no work handle.
#define GODIST_ASYNC 1  // the caller waits later: a work handle, pushed to godist_wait_any once watched
#define GODIST_FLAGS 1  // every flag defined

// godist_buf describes caller-owned memory (usually a tensor's storage):
// data may be NULL only when nbytes is 0.
typedef struct godist_buf {
	void *data;
	int64_t nbytes;
} godist_buf;

// godist_call carries the arguments of one op on one or two buffers
// through the godist_call_* entry points, so that the call crosses the C
// boundary with one pointer. A calling thread keeps one block and refills
// its leading fields for every call (the error buffer stays); the call
// reads the block and writes work (and, on failure, the error buffer).
typedef struct godist_call {
	uint64_t pg;         // process group handle
	void *data;          // the buffer; NULL only with nbytes 0
	int64_t nbytes;
	int64_t arg0;        // allreduce, reduce_scatter: dtype; broadcast: root; send/recv: peer
	int64_t arg1;        // allreduce, reduce_scatter: reduce op; send/recv: tag
	int64_t timeout_ms;  // <= 0: the group's timeout
	int64_t flags;       // GODIST_* flags, as for the other collectives
	uint64_t work;       // out: the work's handle, 0 when none
	char *errbuf;        // out: the error buffer (godist_error, then the message)
	int64_t errlen;
	void *out;           // two-buffer ops (allgather, reduce_scatter, alltoall): the output
	int64_t outbytes;
} godist_call;

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
