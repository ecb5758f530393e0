//go:build ignore

// fake_nccl.c: a fake NCCL and CUDA runtime on host memory, so that the
// shim (backends/nccl/shim.c), the Go package backends/nccl and the
// engine's device path run end to end without a GPU. One shared object
// serves as both libraries:
//
//	gcc -shared -fPIC -o libfakenccl.so fake_nccl.c -lpthread
//
// (the build constraint above keeps the go tool from compiling this file
// into the package next to it). "Device memory" is host memory; work runs
// at the call, so an event recorded after it is done at once, except when
// the test has the fake hang (fake_set_hang): collectives then do nothing,
// events recorded after them on the same stream stay not ready and a
// group stays in progress, until their communicator is aborted. Only one-rank communicators are
// supported. Misuse the real libraries would not report (a PREMUL_SUM op
// destroyed while a grouped call still uses it, a call on an aborted or
// destroyed communicator) is recorded; fake_errors returns it.
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum {
	ncclSuccess = 0,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclInProgress = 7,
};
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidDevice = 101, cudaErrorNotReady = 600 };
enum { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kSend, kRecv };
enum { tInt8, tUint8, tInt32, tUint32, tInt64, tUint64, tFloat16, tFloat32, tFloat64, tBfloat16 };
enum { oSum, oProd, oMax, oMin, oAvg, oNumOps };

#define MAX_PREMUL 64
#define MAX_PENDING 256

typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
} config_prefix;

typedef struct fcomm {
	int nranks, rank;
	int polls;      // GetAsyncError answers ncclInProgress this many more times
	int dead;       // aborted or destroyed: any further use is an error
	int finalized;
	int magic;
} fcomm;
#define COMM_MAGIC 0x5eed

typedef struct fstream {
	fcomm *hung_by; // set by a collective issued while hanging
	int magic;
} fstream;
#define STREAM_MAGIC 0x57ea

typedef struct fevent {
	fcomm *waiting; // not done until this communicator is aborted
	int magic;
} fevent;
#define EVENT_MAGIC 0xe7e7

typedef struct {
	int live;
	int dtype;
	double scalar;
	fcomm *comm;
} premul;

typedef struct {
	int kind, dtype, op, root;
	const void *send;
	void *recv;
	size_t count;
	fcomm *comm;
	fstream *stream;
} call;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int hang, async_error, group_depth, uid_counter;
static fstream default_stream = {NULL, STREAM_MAGIC};
static premul premuls[MAX_PREMUL];
static call pending[MAX_PENDING];
static int npending;
static int64_t n_aborts, n_destroys, n_finalizes, n_group_starts, n_premul_live, n_events_live, n_streams_live,
	n_comms_live, n_errors, n_collectives;
static char errors[4096];

static void record(const char *fmt, ...) {
	n_errors++;
	size_t used = strlen(errors);
	if (used + 2 >= sizeof errors) return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errors + used, sizeof errors - used - 1, fmt, ap);
	va_end(ap);
	strcat(errors, "\n");
}

// --- test control ---------------------------------------------------------

EXPORT void fake_set_hang(int on) {
	pthread_mutex_lock(&mu);
	hang = on;
	pthread_mutex_unlock(&mu);
}

EXPORT void fake_set_async_error(int rc) {
	pthread_mutex_lock(&mu);
	async_error = rc;
	pthread_mutex_unlock(&mu);
}

// fake_counts fills out[0:n] with: aborts, destroys, finalizes, group
// starts, live PREMUL_SUM ops, live events, live streams, live
// communicators, errors recorded, collectives run.
EXPORT int fake_counts(int64_t *out, int n) {
	pthread_mutex_lock(&mu);
	int64_t v[] = {n_aborts,       n_destroys,      n_finalizes,  n_group_starts, n_premul_live,
	               n_events_live,  n_streams_live,  n_comms_live, n_errors,       n_collectives};
	int k = (int)(sizeof v / sizeof v[0]);
	if (n > k) n = k;
	memcpy(out, v, sizeof(int64_t) * (size_t)n);
	pthread_mutex_unlock(&mu);
	return k;
}

// fake_errors copies the misuse recorded so far (one line each) to buf.
EXPORT void fake_errors(char *buf, int len) {
	pthread_mutex_lock(&mu);
	snprintf(buf, (size_t)len, "%s", errors);
	pthread_mutex_unlock(&mu);
}

// --- NCCL -------------------------------------------------------------------

EXPORT int ncclGetVersion(int *v) {
	*v = 23007;
	return ncclSuccess;
}

EXPORT int ncclGetUniqueId(void *out128) {
	pthread_mutex_lock(&mu);
	int n = ++uid_counter;
	pthread_mutex_unlock(&mu);
	memset(out128, 0, 128);
	memcpy(out128, "fakenccl", 8);
	memcpy((char *)out128 + 8, &n, sizeof n);
	return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(int rc) {
	switch (rc) {
	case 0: return "no error";
	case 1: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case 2: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case 3: return "internal error - please report this issue to the NCCL developers";
	case 4: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case 5: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case 6: return "remote process exited or there was a network error";
	case 7: return "NCCL operation in progress";
	}
	return "unknown result code";
}

EXPORT const char *ncclGetLastError(void *comm) {
	(void)comm;
	return "fake NCCL";
}

// check_comm says whether c may be used; mu held.
static int check_comm(fcomm *c, const char *what) {
	if (c == NULL || c->magic != COMM_MAGIC) {
		record("%s: not a communicator", what);
		return ncclInvalidArgument;
	}
	if (c->dead) {
		record("%s: communicator used after abort or destroy", what);
		return ncclInvalidUsage;
	}
	return ncclSuccess;
}

typedef struct {
	char internal[128];
} uid;

EXPORT int ncclCommInitRankConfig(void **out, int nranks, uid id, int rank, void *config) {
	(void)id;
	config_prefix *cfg = config;
	pthread_mutex_lock(&mu);
	int rc = ncclSuccess;
	if (cfg == NULL || cfg->magic != 0xcafebeef || cfg->size < sizeof(config_prefix) || cfg->size > 4096 ||
	    cfg->version < 21800 || cfg->version > 100000) {
		record("ncclCommInitRankConfig: bad config");
		rc = ncclInvalidArgument;
	} else if (cfg->blocking != 0) {
		record("ncclCommInitRankConfig: blocking communicator (godist wants non-blocking ones)");
		rc = ncclInvalidArgument;
	} else if (nranks != 1 || rank != 0) {
		record("ncclCommInitRankConfig: rank %d of %d (the fake has one-rank communicators only)", rank, nranks);
		rc = ncclInvalidUsage;
	}
	if (rc != ncclSuccess) {
		*out = NULL;
		pthread_mutex_unlock(&mu);
		return rc;
	}
	fcomm *c = calloc(1, sizeof *c);
	c->nranks = nranks;
	c->rank = rank;
	c->polls = 3;
	c->magic = COMM_MAGIC;
	n_comms_live++;
	*out = c;
	pthread_mutex_unlock(&mu);
	return ncclInProgress;
}

EXPORT int ncclCommGetAsyncError(void *comm, int *state) {
	fcomm *c = comm;
	pthread_mutex_lock(&mu);
	int rc = check_comm(c, "ncclCommGetAsyncError");
	if (rc == ncclSuccess) {
		if (c->polls > 0) {
			c->polls--;
			*state = ncclInProgress;
		} else {
			*state = async_error;
		}
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

// Communicators are never freed, so that a use after abort or destroy is
// recorded rather than undefined.
EXPORT int ncclCommAbort(void *comm) {
	fcomm *c = comm;
	if (c == NULL) return ncclSuccess;
	pthread_mutex_lock(&mu);
	int rc = check_comm(c, "ncclCommAbort");
	if (rc == ncclSuccess) {
		c->dead = 1;
		n_aborts++;
		n_comms_live--;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT int ncclCommFinalize(void *comm) {
	fcomm *c = comm;
	pthread_mutex_lock(&mu);
	int rc = check_comm(c, "ncclCommFinalize");
	if (rc == ncclSuccess) {
		c->finalized = 1;
		c->polls = 1;
		n_finalizes++;
		rc = ncclInProgress;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT int ncclCommDestroy(void *comm) {
	fcomm *c = comm;
	pthread_mutex_lock(&mu);
	int rc = check_comm(c, "ncclCommDestroy");
	if (rc == ncclSuccess) {
		c->dead = 1;
		n_destroys++;
		n_comms_live--;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

static size_t type_size(int t) {
	switch (t) {
	case tInt8: case tUint8: return 1;
	case tFloat16: case tBfloat16: return 2;
	case tInt32: case tUint32: case tFloat32: return 4;
	case tInt64: case tUint64: case tFloat64: return 8;
	}
	return 0;
}

EXPORT int ncclRedOpCreatePreMulSum(int *op, void *scalar, int dtype, int residence, void *comm) {
	pthread_mutex_lock(&mu);
	int rc = check_comm(comm, "ncclRedOpCreatePreMulSum");
	if (rc == ncclSuccess && (residence != 1 || (dtype != tFloat32 && dtype != tFloat64))) {
		record("ncclRedOpCreatePreMulSum: residence %d dtype %d not supported by the fake", residence, dtype);
		rc = ncclInvalidArgument;
	}
	int i = 0;
	if (rc == ncclSuccess) {
		while (i < MAX_PREMUL && premuls[i].live) i++;
		if (i == MAX_PREMUL) {
			record("ncclRedOpCreatePreMulSum: too many live ops");
			rc = ncclInternalError;
		}
	}
	if (rc == ncclSuccess) {
		premuls[i].live = 1;
		premuls[i].dtype = dtype;
		premuls[i].comm = comm;
		premuls[i].scalar = dtype == tFloat32 ? (double)*(float *)scalar : *(double *)scalar;
		n_premul_live++;
		*op = oNumOps + i;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT int ncclRedOpDestroy(int op, void *comm) {
	pthread_mutex_lock(&mu);
	int rc = check_comm(comm, "ncclRedOpDestroy");
	int i = op - oNumOps;
	if (rc == ncclSuccess && (i < 0 || i >= MAX_PREMUL || !premuls[i].live || premuls[i].comm != comm)) {
		record("ncclRedOpDestroy: op %d is not a live op of this communicator", op);
		rc = ncclInvalidArgument;
	}
	if (rc == ncclSuccess) {
		for (int k = 0; k < npending; k++) {
			if (pending[k].op == op && pending[k].kind != kSend && pending[k].kind != kRecv &&
			    pending[k].kind != kBroadcast && pending[k].kind != kAllGather) {
				record("ncclRedOpDestroy: op %d destroyed while a grouped call still uses it (before ncclGroupEnd)",
				       op);
				break;
			}
		}
		premuls[i].live = 0;
		n_premul_live--;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

static fstream *stream_of(void *s) { return s == NULL ? &default_stream : (fstream *)s; }

// reduce1 is the one-rank result of op on n elements: recv = send, or
// send times the PREMUL_SUM factor; mu held.
static int reduce1(const call *c, size_t n) {
	size_t es = type_size(c->dtype);
	if (es == 0) {
		record("reduction on unknown dtype %d", c->dtype);
		return ncclInvalidArgument;
	}
	if (c->op >= 0 && c->op < oNumOps) {
		// sum, prod, max, min and avg of one rank's values: the values.
		memmove(c->recv, c->send, n * es);
		return ncclSuccess;
	}
	int i = c->op - oNumOps;
	if (i < 0 || i >= MAX_PREMUL || !premuls[i].live) {
		record("reduction with op %d, which is not a live op (destroyed before the call ran?)", c->op);
		return ncclInvalidArgument;
	}
	double f = premuls[i].scalar;
	if (c->dtype == tFloat32) {
		const float *s = c->send;
		float *r = c->recv;
		for (size_t k = 0; k < n; k++) r[k] = (float)(s[k] * f);
	} else if (c->dtype == tFloat64) {
		const double *s = c->send;
		double *r = c->recv;
		for (size_t k = 0; k < n; k++) r[k] = s[k] * f;
	} else {
		record("PREMUL_SUM on dtype %d", c->dtype);
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

// run carries out c (one rank); mu held.
static int run(call *c) {
	n_collectives++;
	if (hang) {
		c->stream->hung_by = c->comm;
		return ncclSuccess;
	}
	size_t es = type_size(c->dtype);
	switch (c->kind) {
	case kAllReduce:
	case kReduce:
	case kReduceScatter:
		return reduce1(c, c->count);
	case kBroadcast:
	case kAllGather:
		memmove(c->recv, c->send, c->count * es);
		return ncclSuccess;
	}
	record("run: call kind %d", c->kind);
	return ncclInternalError;
}

// enqueue runs c now, or at the end of the group when in one.
static int enqueue(call c, const char *what) {
	pthread_mutex_lock(&mu);
	int rc = check_comm(c.comm, what);
	if (rc == ncclSuccess && c.comm->polls > 0) {
		record("%s: communicator not ready", what);
		rc = ncclInvalidUsage;
	}
	if (rc == ncclSuccess && async_error != 0) {
		rc = async_error;
	}
	if (rc == ncclSuccess && type_size(c.dtype) == 0) {
		record("%s: dtype %d", what, c.dtype);
		rc = ncclInvalidArgument;
	}
	if (rc == ncclSuccess && (c.kind == kSend || c.kind == kRecv || c.kind == kBroadcast || c.kind == kReduce) &&
	    c.root != 0) {
		record("%s: peer or root %d in a one-rank communicator", what, c.root);
		rc = ncclInvalidArgument;
	}
	if (rc == ncclSuccess && c.op >= oNumOps && (c.kind == kAllReduce || c.kind == kReduce || c.kind == kReduceScatter)) {
		int i = c.op - oNumOps;
		if (i >= MAX_PREMUL || !premuls[i].live) {
			record("%s: op %d is not a live op", what, c.op);
			rc = ncclInvalidArgument;
		}
	}
	if (rc == ncclSuccess) {
		if (group_depth > 0) {
			if (npending == MAX_PENDING) {
				record("%s: too many calls in one group", what);
				rc = ncclInternalError;
			} else {
				pending[npending++] = c;
			}
		} else if (c.kind == kSend || c.kind == kRecv) {
			record("%s: to self outside a group (would hang)", what);
			rc = ncclInvalidUsage;
		} else {
			rc = run(&c);
		}
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

static call mk(int kind, const void *send, void *recv, size_t count, int dtype, int op, int root, void *comm,
               void *stream) {
	call c = {kind, dtype, op, root, send, recv, count, comm, stream_of(stream)};
	return c;
}

EXPORT int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *comm, void *st) {
	return enqueue(mk(kAllReduce, s, r, n, dt, op, 0, comm, st), "ncclAllReduce");
}

EXPORT int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, void *comm, void *st) {
	return enqueue(mk(kBroadcast, s, r, n, dt, -1, root, comm, st), "ncclBroadcast");
}

EXPORT int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, void *comm, void *st) {
	return enqueue(mk(kReduce, s, r, n, dt, op, root, comm, st), "ncclReduce");
}

EXPORT int ncclAllGather(const void *s, void *r, size_t n, int dt, void *comm, void *st) {
	return enqueue(mk(kAllGather, s, r, n, dt, -1, 0, comm, st), "ncclAllGather");
}

EXPORT int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, void *comm, void *st) {
	return enqueue(mk(kReduceScatter, s, r, n, dt, op, 0, comm, st), "ncclReduceScatter");
}

EXPORT int ncclSend(const void *s, size_t n, int dt, int peer, void *comm, void *st) {
	return enqueue(mk(kSend, s, NULL, n, dt, -1, peer, comm, st), "ncclSend");
}

EXPORT int ncclRecv(void *r, size_t n, int dt, int peer, void *comm, void *st) {
	return enqueue(mk(kRecv, NULL, r, n, dt, -1, peer, comm, st), "ncclRecv");
}

EXPORT int ncclGroupStart(void) {
	pthread_mutex_lock(&mu);
	group_depth++;
	n_group_starts++;
	pthread_mutex_unlock(&mu);
	return ncclSuccess;
}

// ncclGroupEnd runs the group's calls: the collectives in order, each
// receive taking the bytes of the next unmatched send (to self). Like a
// non-blocking communicator's, it answers ncclInProgress, and the
// communicators settle after one more ncclCommGetAsyncError (never while
// the fake hangs: they stay in progress until aborted).
EXPORT int ncclGroupEnd(void) {
	pthread_mutex_lock(&mu);
	if (group_depth == 0) {
		record("ncclGroupEnd without ncclGroupStart");
		pthread_mutex_unlock(&mu);
		return ncclInvalidUsage;
	}
	if (--group_depth > 0) {
		pthread_mutex_unlock(&mu);
		return ncclSuccess;
	}
	int rc = ncclSuccess, any = 0;
	int used[MAX_PENDING] = {0};
	for (int i = 0; i < npending && rc == ncclSuccess; i++) {
		call *c = &pending[i];
		any = 1;
		if (c->kind == kSend) continue;
		if (c->kind != kRecv) {
			rc = run(c);
			continue;
		}
		int j = 0;
		while (j < npending && (pending[j].kind != kSend || used[j] || pending[j].comm != c->comm)) j++;
		if (j == npending) {
			record("ncclRecv: no matching send in the group (would hang)");
			rc = ncclInvalidUsage;
			break;
		}
		used[j] = 1;
		size_t sb = pending[j].count * type_size(pending[j].dtype), rb = c->count * type_size(c->dtype);
		if (sb != rb) {
			record("ncclRecv of %zu bytes matched with a send of %zu", rb, sb);
			rc = ncclInvalidUsage;
			break;
		}
		n_collectives++;
		if (hang) {
			c->stream->hung_by = c->comm;
		} else {
			memmove(c->recv, pending[j].send, rb);
		}
	}
	for (int j = 0; j < npending && rc == ncclSuccess; j++) {
		if (pending[j].kind == kSend && !used[j]) {
			record("ncclSend: no matching receive in the group (would hang)");
			rc = ncclInvalidUsage;
		}
	}
	if (rc == ncclSuccess && any) {
		// Hanging, the group stays in progress (a peer that never joins).
		for (int i = 0; i < npending; i++) pending[i].comm->polls = hang ? 1 << 30 : 1;
		rc = ncclInProgress;
	}
	npending = 0;
	pthread_mutex_unlock(&mu);
	return rc;
}

// --- CUDA runtime -----------------------------------------------------------

EXPORT int cudaRuntimeGetVersion(int *v) {
	*v = 13000;
	return cudaSuccess;
}

EXPORT int cudaGetDeviceCount(int *n) {
	*n = 1;
	return cudaSuccess;
}

EXPORT int cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
EXPORT int cudaGetDevice(int *dev) {
	*dev = 0;
	return cudaSuccess;
}

EXPORT const char *cudaGetErrorString(int rc) {
	switch (rc) {
	case 0: return "no error";
	case 1: return "invalid argument";
	case 101: return "invalid device ordinal";
	case 400: return "invalid resource handle";
	case 600: return "device not ready";
	}
	return "unrecognized error code";
}

EXPORT int cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
	*least = 0;
	*greatest = -5;
	return cudaSuccess;
}

EXPORT int cudaStreamCreateWithPriority(void **s, unsigned flags, int prio) {
	(void)flags;
	(void)prio;
	fstream *f = calloc(1, sizeof *f);
	f->magic = STREAM_MAGIC;
	pthread_mutex_lock(&mu);
	n_streams_live++;
	pthread_mutex_unlock(&mu);
	*s = f;
	return cudaSuccess;
}

EXPORT int cudaStreamDestroy(void *s) {
	fstream *f = s;
	if (f == NULL || f->magic != STREAM_MAGIC) {
		pthread_mutex_lock(&mu);
		record("cudaStreamDestroy: not a stream");
		pthread_mutex_unlock(&mu);
		return 400;
	}
	pthread_mutex_lock(&mu);
	n_streams_live--;
	pthread_mutex_unlock(&mu);
	f->magic = 0; // never freed, so that a second destroy is recorded
	return cudaSuccess;
}

// live is c while it has not been aborted (work it hangs is not done).
static fcomm *live(fcomm *c) { return c != NULL && !c->dead ? c : NULL; }

static int check_event(fevent *e, const char *what) {
	if (e == NULL || e->magic != EVENT_MAGIC) {
		record("%s: not an event", what);
		return 400;
	}
	return cudaSuccess;
}

EXPORT int cudaEventCreateWithFlags(void **ev, unsigned flags) {
	(void)flags;
	fevent *e = calloc(1, sizeof *e);
	e->magic = EVENT_MAGIC;
	pthread_mutex_lock(&mu);
	n_events_live++;
	pthread_mutex_unlock(&mu);
	*ev = e;
	return cudaSuccess;
}

EXPORT int cudaEventRecord(void *ev, void *s) {
	pthread_mutex_lock(&mu);
	int rc = check_event(ev, "cudaEventRecord");
	if (rc == cudaSuccess) ((fevent *)ev)->waiting = live(stream_of(s)->hung_by);
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT int cudaStreamWaitEvent(void *s, void *ev, unsigned flags) {
	(void)flags;
	pthread_mutex_lock(&mu);
	int rc = check_event(ev, "cudaStreamWaitEvent");
	if (rc == cudaSuccess) {
		fcomm *c = live(((fevent *)ev)->waiting);
		if (c != NULL) stream_of(s)->hung_by = c;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT int cudaEventQuery(void *ev) {
	pthread_mutex_lock(&mu);
	int rc = check_event(ev, "cudaEventQuery");
	if (rc == cudaSuccess && live(((fevent *)ev)->waiting) != NULL) rc = cudaErrorNotReady;
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT int cudaEventDestroy(void *ev) {
	pthread_mutex_lock(&mu);
	int rc = check_event(ev, "cudaEventDestroy");
	if (rc == cudaSuccess) {
		((fevent *)ev)->magic = 0;
		n_events_live--;
	}
	pthread_mutex_unlock(&mu);
	return rc; // never freed, so that a second destroy is recorded
}
