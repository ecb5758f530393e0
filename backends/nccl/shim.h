// shim.h: the part of NCCL and the CUDA runtime godist uses, reached
// through function pointers resolved at run time (gn_bind), so that
// libgodist.so has no NEEDED entry on either and loads on hosts without
// them. Every gn_ function that can fail fills a gn_status and returns 0
// on success, nonzero on failure.
#ifndef GODIST_NCCL_SHIM_H
#define GODIST_NCCL_SHIM_H

#include <stdint.h>

// The NCCL call a gn_call describes.
enum {
	GN_ALLREDUCE = 0,
	GN_BROADCAST = 1,
	GN_REDUCE = 2,
	GN_ALLGATHER = 3,
	GN_REDUCESCATTER = 4,
	GN_SEND = 5,
	GN_RECV = 6,
};

// Failures that are neither NCCL's nor CUDA's (gn_status.nccl).
enum {
	GN_TIMEOUT = 1000,     // a non-blocking call stayed in progress past its deadline
	GN_NOT_LOADED = 1001,  // gn_bind has not succeeded
	GN_STOPPED = 1002,     // a call in progress was given up because the communicator is being aborted
};

// gn_call describes one NCCL call. count is in elements of dtype; root is
// the root of broadcast and reduce, the peer of send and recv. premul: op
// is ignored and a PREMUL_SUM op is made with the scalar at &scalar (of
// dtype, host-immediate) for this call.
typedef struct gn_call {
	int32_t kind;
	int32_t dtype;
	int32_t op;
	int32_t root;
	const void *send;
	void *recv;
	uint64_t count;
	uint64_t scalar;
	int32_t premul;
	int32_t pad;
} gn_call;

// gn_status says which call failed and how: nccl is an ncclResult_t (or a
// GN_ value), cuda a cudaError_t; what names the call (a static string).
typedef struct gn_status {
	int32_t nccl;
	int32_t cuda;
	const char *what;
} gn_status;

void *gn_dlopen(const char *name, int noload, char *err, int errlen);
int gn_bind(void *nccl, void *cudart, char *err, int errlen);

int gn_nccl_version(int *version, gn_status *st);
int gn_cuda_runtime_version(int *version, gn_status *st);
int gn_unique_id(void *out128, gn_status *st);
const char *gn_nccl_string(int rc);
const char *gn_cuda_string(int rc);
const char *gn_last_error(void *comm);
int gn_device_count(int *n, gn_status *st);

// gn_comm_init makes a non-blocking communicator on device dev and its
// internal stream, polling until it is ready or timeout_ms passes (then it
// aborts it).
int gn_comm_init(void **comm, void **stream, int dev, int nranks, const void *id128, int rank, int64_t timeout_ms,
                 gn_status *st);
// gn_launch enqueues calls (in one NCCL group when n > 1) on user's stream,
// or, when own is not NULL, on own after everything queued on user so far
// (recording pre on user), and records end after them.
// *stop set (by another thread, about to abort the communicator) ends its
// wait for calls in progress.
int gn_launch(void *comm, int dev, uintptr_t user, void *own, void *pre, void *end, const gn_call *calls, int n,
              int64_t timeout_ms, const int *stop, gn_status *st);
// Every call that touches a communicator, stream or event takes the device
// it lives on, makes it current for the call and restores the caller's:
// the CUDA runtime's current device is per host thread, and Go runs these
// calls on whatever thread a goroutine has (the watchdog's, a closer's),
// where it would default to device 0.
int gn_async_error(void *comm, int dev, gn_status *st);
int gn_abort(void *comm, int dev, gn_status *st);
// gn_destroy finalizes and destroys a healthy communicator, aborting it if
// that does not end within timeout_ms.
int gn_destroy(void *comm, int dev, int64_t timeout_ms, gn_status *st);

int gn_event_create(int dev, void **ev, gn_status *st);
// gn_event_query returns 1 when the work before ev has completed, 0 when
// not yet, -1 on an error (in st).
int gn_event_query(int dev, void *ev, gn_status *st);
int gn_event_destroy(int dev, void *ev, gn_status *st);
int gn_stream_wait(int dev, uintptr_t stream, void *ev, gn_status *st);
int gn_stream_destroy(int dev, void *stream, gn_status *st);

#endif
