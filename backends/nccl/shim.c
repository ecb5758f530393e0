// shim.c: NCCL and the CUDA runtime through function pointers (shim.h).
#include "shim.h"

#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The ABI types, declared here rather than taken from nccl.h and
// cuda_runtime_api.h so that building needs neither.
typedef struct { char internal[128]; } gn_uid;
typedef int (*fn_void)(void);

// ncclConfig_t as NCCL 2.18 declared it. NCCL copies min(size, its own
// sizeof) bytes and treats fields newer than `version` as unset, so this
// prefix is valid for every later version.
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
	int splitShare;
} gn_config;

#define GN_CONFIG_VERSION 21800
#define GN_MAGIC 0xcafebeef
#define NCCL_IN_PROGRESS 7
#define CUDA_NOT_READY 600
#define STREAM_NON_BLOCKING 1
#define EVENT_DISABLE_TIMING 2
#define SCALAR_HOST_IMMEDIATE 1

static struct {
	int bound;
	int (*GetVersion)(int *);
	int (*GetUniqueId)(gn_uid *);
	int (*CommInitRankConfig)(void **, int, gn_uid, int, gn_config *);
	int (*CommGetAsyncError)(void *, int *);
	int (*CommAbort)(void *);
	int (*CommFinalize)(void *);
	int (*CommDestroy)(void *);
	const char *(*GetErrorString)(int);
	const char *(*GetLastError)(void *);
	int (*AllReduce)(const void *, void *, size_t, int, int, void *, void *);
	int (*Broadcast)(const void *, void *, size_t, int, int, void *, void *);
	int (*Reduce)(const void *, void *, size_t, int, int, int, void *, void *);
	int (*AllGather)(const void *, void *, size_t, int, void *, void *);
	int (*ReduceScatter)(const void *, void *, size_t, int, int, void *, void *);
	int (*Send)(const void *, size_t, int, int, void *, void *);
	int (*Recv)(void *, size_t, int, int, void *, void *);
	int (*GroupStart)(void);
	int (*GroupEnd)(void);
	int (*RedOpCreatePreMulSum)(int *, void *, int, int, void *);
	int (*RedOpDestroy)(int, void *);

	int (*RuntimeGetVersion)(int *);
	int (*GetDeviceCount)(int *);
	int (*SetDevice)(int);
	int (*GetDevice)(int *);
	const char *(*CudaGetErrorString)(int);
	int (*DeviceGetStreamPriorityRange)(int *, int *);
	int (*StreamCreateWithPriority)(void **, unsigned, int);
	int (*StreamDestroy)(void *);
	int (*StreamWaitEvent)(void *, void *, unsigned);
	int (*EventCreateWithFlags)(void **, unsigned);
	int (*EventRecord)(void *, void *);
	int (*EventQuery)(void *);
	int (*EventDestroy)(void *);
} L;

void *gn_dlopen(const char *name, int noload, char *err, int errlen) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL | (noload ? RTLD_NOLOAD : 0));
	if (h == NULL && err != NULL && errlen > 0) {
		const char *e = dlerror();
		snprintf(err, (size_t)errlen, "%s", e ? e : "dlopen failed");
	}
	return h;
}

#define BIND(lib, field, sym)                                                        \
	do {                                                                             \
		*(void **)(&L.field) = dlsym(lib, sym);                                      \
		if (L.field == NULL) {                                                       \
			snprintf(err, (size_t)errlen, "symbol %s not found", sym);              \
			return 1;                                                                \
		}                                                                            \
	} while (0)

int gn_bind(void *nccl, void *cudart, char *err, int errlen) {
	if (L.bound) {
		return 0;
	}
	BIND(nccl, GetVersion, "ncclGetVersion");
	BIND(nccl, GetUniqueId, "ncclGetUniqueId");
	BIND(nccl, CommInitRankConfig, "ncclCommInitRankConfig");
	BIND(nccl, CommGetAsyncError, "ncclCommGetAsyncError");
	BIND(nccl, CommAbort, "ncclCommAbort");
	BIND(nccl, CommFinalize, "ncclCommFinalize");
	BIND(nccl, CommDestroy, "ncclCommDestroy");
	BIND(nccl, GetErrorString, "ncclGetErrorString");
	BIND(nccl, GetLastError, "ncclGetLastError");
	BIND(nccl, AllReduce, "ncclAllReduce");
	BIND(nccl, Broadcast, "ncclBroadcast");
	BIND(nccl, Reduce, "ncclReduce");
	BIND(nccl, AllGather, "ncclAllGather");
	BIND(nccl, ReduceScatter, "ncclReduceScatter");
	BIND(nccl, Send, "ncclSend");
	BIND(nccl, Recv, "ncclRecv");
	BIND(nccl, GroupStart, "ncclGroupStart");
	BIND(nccl, GroupEnd, "ncclGroupEnd");
	BIND(nccl, RedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum");
	BIND(nccl, RedOpDestroy, "ncclRedOpDestroy");
	BIND(cudart, RuntimeGetVersion, "cudaRuntimeGetVersion");
	BIND(cudart, GetDeviceCount, "cudaGetDeviceCount");
	BIND(cudart, SetDevice, "cudaSetDevice");
	BIND(cudart, GetDevice, "cudaGetDevice");
	BIND(cudart, CudaGetErrorString, "cudaGetErrorString");
	BIND(cudart, DeviceGetStreamPriorityRange, "cudaDeviceGetStreamPriorityRange");
	BIND(cudart, StreamCreateWithPriority, "cudaStreamCreateWithPriority");
	BIND(cudart, StreamDestroy, "cudaStreamDestroy");
	BIND(cudart, StreamWaitEvent, "cudaStreamWaitEvent");
	BIND(cudart, EventCreateWithFlags, "cudaEventCreateWithFlags");
	BIND(cudart, EventRecord, "cudaEventRecord");
	BIND(cudart, EventQuery, "cudaEventQuery");
	BIND(cudart, EventDestroy, "cudaEventDestroy");
	L.bound = 1;
	return 0;
}

static int nccl_fail(gn_status *st, int rc, const char *what) {
	st->nccl = rc;
	st->cuda = 0;
	st->what = what;
	return 1;
}

static int cuda_fail(gn_status *st, int rc, const char *what) {
	st->nccl = 0;
	st->cuda = rc;
	st->what = what;
	return 1;
}

#define NOT_BOUND(st) \
	if (!L.bound) return nccl_fail(st, GN_NOT_LOADED, "gn_bind")
#define CUDA(call, what)                         \
	do {                                         \
		int rc_ = (call);                        \
		if (rc_ != 0) return cuda_fail(st, rc_, what); \
	} while (0)

// ON_DEVICE(d) makes device d current on the calling thread (the caller's
// Python thread: its torch current device) for the rest of the function,
// and restores the device that was current at every return.
typedef struct {
	int dev, prev;
} dev_guard;

static void restore_device(dev_guard *g) {
	if (g->prev >= 0 && g->prev != g->dev) L.SetDevice(g->prev);
}

#define ON_DEVICE(d)                                                            \
	dev_guard guard_ __attribute__((cleanup(restore_device))) = {(d), -1};     \
	if (L.GetDevice(&guard_.prev) != 0) guard_.prev = -1;                      \
	if (guard_.prev != (d)) CUDA(L.SetDevice(d), "cudaSetDevice")

// TRY_DEVICE(d) is ON_DEVICE for calls that must go ahead even when the
// device cannot be made current (an abort, a teardown).
#define TRY_DEVICE(d)                                                           \
	dev_guard guard_ __attribute__((cleanup(restore_device))) = {(d), -1};     \
	if (L.GetDevice(&guard_.prev) != 0) guard_.prev = -1;                      \
	if (guard_.prev != (d)) (void)L.SetDevice(d)

static int64_t now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// settle polls a non-blocking communicator until its last call is no
// longer in progress, at most until deadline (ms, CLOCK_MONOTONIC).
static int settle(void *comm, int rc, int64_t deadline, const int *stop, const char *what, gn_status *st) {
	while (rc == NCCL_IN_PROGRESS) {
		if (stop != NULL && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
			return nccl_fail(st, GN_STOPPED, what);
		}
		int state = 0;
		int qrc = L.CommGetAsyncError(comm, &state);
		if (qrc != 0) {
			return nccl_fail(st, qrc, "ncclCommGetAsyncError");
		}
		rc = state;
		if (rc == NCCL_IN_PROGRESS) {
			if (now_ms() > deadline) {
				return nccl_fail(st, GN_TIMEOUT, what);
			}
			sched_yield();
		}
	}
	return rc == 0 ? 0 : nccl_fail(st, rc, what);
}

int gn_nccl_version(int *version, gn_status *st) {
	NOT_BOUND(st);
	int rc = L.GetVersion(version);
	return rc == 0 ? 0 : nccl_fail(st, rc, "ncclGetVersion");
}

int gn_cuda_runtime_version(int *version, gn_status *st) {
	NOT_BOUND(st);
	CUDA(L.RuntimeGetVersion(version), "cudaRuntimeGetVersion");
	return 0;
}

int gn_unique_id(void *out128, gn_status *st) {
	NOT_BOUND(st);
	gn_uid id;
	int rc = L.GetUniqueId(&id);
	if (rc != 0) {
		return nccl_fail(st, rc, "ncclGetUniqueId");
	}
	memcpy(out128, &id, sizeof id);
	return 0;
}

const char *gn_nccl_string(int rc) {
	if (rc == GN_TIMEOUT) return "still in progress when the deadline passed";
	if (rc == GN_NOT_LOADED) return "NCCL is not loaded";
	if (rc == GN_STOPPED) return "given up: the communicator is being aborted";
	return L.bound ? L.GetErrorString(rc) : "unknown NCCL error";
}

const char *gn_cuda_string(int rc) { return L.bound ? L.CudaGetErrorString(rc) : "unknown CUDA error"; }

const char *gn_last_error(void *comm) { return L.bound ? L.GetLastError(comm) : ""; }

int gn_device_count(int *n, gn_status *st) {
	NOT_BOUND(st);
	CUDA(L.GetDeviceCount(n), "cudaGetDeviceCount");
	return 0;
}

int gn_comm_init(void **comm, void **stream, int dev, int nranks, const void *id128, int rank, int64_t timeout_ms,
                 gn_status *st) {
	NOT_BOUND(st);
	*comm = NULL;
	*stream = NULL;
	ON_DEVICE(dev);
	int least = 0, greatest = 0;
	CUDA(L.DeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
	CUDA(L.StreamCreateWithPriority(stream, STREAM_NON_BLOCKING, greatest), "cudaStreamCreateWithPriority");
	gn_config cfg = {sizeof(gn_config), GN_MAGIC, GN_CONFIG_VERSION, 0, INT_MIN, INT_MIN, INT_MIN, NULL, INT_MIN};
	gn_uid id;
	memcpy(&id, id128, sizeof id);
	int64_t deadline = now_ms() + timeout_ms;
	int rc = L.CommInitRankConfig(comm, nranks, id, rank, &cfg);
	if (rc != 0 && rc != NCCL_IN_PROGRESS) {
		L.StreamDestroy(*stream);
		*stream = NULL;
		if (*comm != NULL) {
			L.CommAbort(*comm);
			*comm = NULL;
		}
		return nccl_fail(st, rc, "ncclCommInitRankConfig");
	}
	if (settle(*comm, rc, deadline, NULL, "ncclCommInitRankConfig", st) != 0) {
		L.CommAbort(*comm);
		*comm = NULL;
		L.StreamDestroy(*stream);
		*stream = NULL;
		return 1;
	}
	return 0;
}

// issue makes call c on stream s. A PREMUL_SUM op it creates is stored in
// *made (else -1), for the caller to destroy once the call (or its group)
// has been issued.
static int issue(void *comm, const gn_call *c, void *s, int *made, gn_status *st) {
	int op = c->op, rc;
	*made = -1;
	if (c->premul) {
		rc = L.RedOpCreatePreMulSum(&op, (void *)&c->scalar, c->dtype, SCALAR_HOST_IMMEDIATE, comm);
		if (rc != 0) {
			return nccl_fail(st, rc, "ncclRedOpCreatePreMulSum");
		}
		*made = op;
	}
	const char *what = "";
	switch (c->kind) {
	case GN_ALLREDUCE:
		rc = L.AllReduce(c->send, c->recv, c->count, c->dtype, op, comm, s);
		what = "ncclAllReduce";
		break;
	case GN_BROADCAST:
		rc = L.Broadcast(c->send, c->recv, c->count, c->dtype, c->root, comm, s);
		what = "ncclBroadcast";
		break;
	case GN_REDUCE:
		rc = L.Reduce(c->send, c->recv, c->count, c->dtype, op, c->root, comm, s);
		what = "ncclReduce";
		break;
	case GN_ALLGATHER:
		rc = L.AllGather(c->send, c->recv, c->count, c->dtype, comm, s);
		what = "ncclAllGather";
		break;
	case GN_REDUCESCATTER:
		rc = L.ReduceScatter(c->send, c->recv, c->count, c->dtype, op, comm, s);
		what = "ncclReduceScatter";
		break;
	case GN_SEND:
		rc = L.Send(c->send, c->count, c->dtype, c->root, comm, s);
		what = "ncclSend";
		break;
	case GN_RECV:
		rc = L.Recv(c->recv, c->count, c->dtype, c->root, comm, s);
		what = "ncclRecv";
		break;
	default:
		return nccl_fail(st, 4, "unknown call kind");
	}
	if (rc != 0 && rc != NCCL_IN_PROGRESS) {
		return nccl_fail(st, rc, what);
	}
	st->nccl = rc;
	st->what = what;
	return 0;
}

int gn_launch(void *comm, int dev, uintptr_t user_, void *own, void *pre, void *end, const gn_call *calls, int n,
              int64_t timeout_ms, const int *stop, gn_status *st) {
	NOT_BOUND(st);
	void *user = (void *)user_;
	int64_t deadline = now_ms() + timeout_ms;
	ON_DEVICE(dev);
	void *s = user;
	if (own != NULL) {
		CUDA(L.EventRecord(pre, user), "cudaEventRecord");
		CUDA(L.StreamWaitEvent(own, pre, 0), "cudaStreamWaitEvent");
		s = own;
	}
	// PREMUL_SUM ops made for the calls, destroyed once the calls are
	// issued (NCCL allows it once the last call using an op has returned;
	// in a group, that is ncclGroupEnd).
	int one = -1;
	int *made = n > 1 ? (int *)malloc(sizeof(int) * (size_t)n) : &one;
	if (made == NULL) {
		return nccl_fail(st, 2, "malloc");
	}
	int rc = 0, failed = 0, issued = 0;
	const char *what = "ncclGroupEnd";
	if (n == 1) {
		failed = issue(comm, &calls[0], s, &made[0], st);
		issued = 1;
		rc = st->nccl;
		what = st->what;
	} else if (n > 1) {
		rc = L.GroupStart();
		if (rc != 0) {
			free(made);
			return nccl_fail(st, rc, "ncclGroupStart");
		}
		for (; issued < n && !failed; issued++) {
			failed = issue(comm, &calls[issued], s, &made[issued], st);
		}
		int end_rc = L.GroupEnd();
		if (!failed) {
			rc = end_rc;
			if (rc != 0 && rc != NCCL_IN_PROGRESS) {
				failed = nccl_fail(st, rc, what);
			}
		}
	}
	if (!failed) {
		failed = settle(comm, rc, deadline, stop, what, st);
	}
	for (int i = 0; i < issued; i++) {
		if (made[i] >= 0) {
			L.RedOpDestroy(made[i], comm);
		}
	}
	if (made != &one) {
		free(made);
	}
	if (failed) {
		return 1;
	}
	CUDA(L.EventRecord(end, s), "cudaEventRecord");
	return 0;
}

int gn_async_error(void *comm, int dev, gn_status *st) {
	NOT_BOUND(st);
	ON_DEVICE(dev);
	int state = 0;
	int rc = L.CommGetAsyncError(comm, &state);
	if (rc != 0) {
		return nccl_fail(st, rc, "ncclCommGetAsyncError");
	}
	if (state != 0 && state != NCCL_IN_PROGRESS) {
		return nccl_fail(st, state, "NCCL asynchronous error");
	}
	return 0;
}

int gn_abort(void *comm, int dev, gn_status *st) {
	NOT_BOUND(st);
	TRY_DEVICE(dev);
	int rc = L.CommAbort(comm);
	return rc == 0 ? 0 : nccl_fail(st, rc, "ncclCommAbort");
}

int gn_destroy(void *comm, int dev, int64_t timeout_ms, gn_status *st) {
	NOT_BOUND(st);
	int64_t deadline = now_ms() + timeout_ms;
	ON_DEVICE(dev);
	int rc = L.CommFinalize(comm);
	if ((rc != 0 && rc != NCCL_IN_PROGRESS) || settle(comm, rc, deadline, NULL, "ncclCommFinalize", st) != 0) {
		L.CommAbort(comm);
		return rc != 0 && rc != NCCL_IN_PROGRESS ? nccl_fail(st, rc, "ncclCommFinalize") : 1;
	}
	rc = L.CommDestroy(comm);
	return rc == 0 ? 0 : nccl_fail(st, rc, "ncclCommDestroy");
}

int gn_event_create(int dev, void **ev, gn_status *st) {
	NOT_BOUND(st);
	ON_DEVICE(dev);
	CUDA(L.EventCreateWithFlags(ev, EVENT_DISABLE_TIMING), "cudaEventCreateWithFlags");
	return 0;
}

int gn_event_query(int dev, void *ev, gn_status *st) {
	NOT_BOUND(st);
	ON_DEVICE(dev);
	int rc = L.EventQuery(ev);
	if (rc == 0) return 1;
	if (rc == CUDA_NOT_READY) return 0;
	cuda_fail(st, rc, "cudaEventQuery");
	return -1;
}

int gn_event_destroy(int dev, void *ev, gn_status *st) {
	NOT_BOUND(st);
	TRY_DEVICE(dev);
	CUDA(L.EventDestroy(ev), "cudaEventDestroy");
	return 0;
}

int gn_stream_wait(int dev, uintptr_t stream, void *ev, gn_status *st) {
	NOT_BOUND(st);
	ON_DEVICE(dev);
	CUDA(L.StreamWaitEvent((void *)stream, ev, 0), "cudaStreamWaitEvent");
	return 0;
}

int gn_stream_destroy(int dev, void *stream, gn_status *st) {
	NOT_BOUND(st);
	ON_DEVICE(dev);
	CUDA(L.StreamDestroy(stream), "cudaStreamDestroy");
	return 0;
}
