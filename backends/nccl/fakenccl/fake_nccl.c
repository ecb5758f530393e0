//go:build ignore

// fake_nccl.c: a fake NCCL and CUDA runtime on host memory, so that the
// shim (backends/nccl/shim.c), the Go package backends/nccl and the
// engine's device path run end to end without a GPU. One shared object
// serves as both libraries:
//
//	gcc -shared -fPIC -o libfakenccl.so fake_nccl.c fake_cuda.c -lpthread
//
// (the build constraint above keeps the go tool from compiling these files
// into the package next to them). "Device memory" is host memory.
//
// The ranks of a communicator are communicators made in this process with
// the same unique id (a test runs each rank's group in one process). Each
// rank's calls on a communicator (a call, or its calls in one NCCL group)
// are queued in order, and the ranks' entries at the same position run
// together once every rank has posted its own and the work it waits for
// on its stream is done: as on a GPU, a rank's collective waits for its
// peers, and a stream's later work waits for it. Entries that do not
// match (different collectives, a send with no receive from its peer)
// never run, as NCCL would hang. A one-rank communicator's work runs at
// the call. The test can make the fake hang (fake_set_hang): calls then
// never run, events after them stay not ready and a group stays in
// progress, until their communicator is aborted. Reductions of more than
// one rank take float32, float64, int32 and int64. Misuse the real
// libraries would not report (a PREMUL_SUM op destroyed while a grouped
// call still uses it, a call on an aborted or destroyed communicator, a
// call on a stream or event while another device is current) is recorded;
// fake_errors returns it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define MAX_PREMUL 64
#define MAX_PENDING 256

typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
} config_prefix;

typedef struct {
	int live;
	int dtype;
	double scalar;
	fcomm *comm;
} premul;

static int uid_counter;
static premul premuls[MAX_PREMUL];
fclique cliques[MAX_CLIQUES];
int ncliques;
// The calls of the thread's open NCCL group (group state is per thread).
static __thread call pending[MAX_PENDING];
static __thread int npending, group_depth;

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

// clique_of finds or makes the clique of id; mu held.
static fclique *clique_of(const uid *id, int nranks) {
	for (int i = 0; i < ncliques; i++) {
		if (memcmp(cliques[i].id, id->internal, sizeof cliques[i].id) == 0 && cliques[i].joined < cliques[i].nranks) {
			return &cliques[i];
		}
	}
	if (ncliques == MAX_CLIQUES) return NULL;
	fclique *q = &cliques[ncliques++];
	memcpy(q->id, id->internal, sizeof q->id);
	q->nranks = nranks;
	return q;
}

EXPORT int ncclCommInitRankConfig(void **out, int nranks, uid id, int rank, void *config) {
	config_prefix *cfg = config;
	pthread_mutex_lock(&mu);
	int rc = ncclSuccess;
	fclique *q = NULL;
	if (cfg == NULL || cfg->magic != 0xcafebeef || cfg->size < sizeof(config_prefix) || cfg->size > 4096 ||
	    cfg->version < 21800 || cfg->version > 100000) {
		record("ncclCommInitRankConfig: bad config");
		rc = ncclInvalidArgument;
	} else if (cfg->blocking != 0) {
		record("ncclCommInitRankConfig: blocking communicator (godist wants non-blocking ones)");
		rc = ncclInvalidArgument;
	} else if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) {
		record("ncclCommInitRankConfig: rank %d of %d", rank, nranks);
		rc = ncclInvalidArgument;
	} else if ((q = clique_of(&id, nranks)) == NULL || q->nranks != nranks || q->comms[rank] != NULL) {
		record("ncclCommInitRankConfig: rank %d of %d joins a communicator it does not fit", rank, nranks);
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
	c->dev = cur_dev;
	c->polls = 3;
	c->clique = q;
	c->magic = COMM_MAGIC;
	q->comms[rank] = c;
	q->joined++;
	n_comms_live++;
	*out = c;
	pthread_mutex_unlock(&mu);
	return ncclInProgress;
}

// ready says whether c's initialization is over: every rank has joined.
static int ready(fcomm *c) { return c->clique->joined == c->nranks; }

EXPORT int ncclCommGetAsyncError(void *comm, int *state) {
	fcomm *c = comm;
	pthread_mutex_lock(&mu);
	int rc = check_comm(c, "ncclCommGetAsyncError");
	if (rc == ncclSuccess) {
		if (c->polls > 0 || !ready(c)) {
			if (c->polls > 0) c->polls--;
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

// enqueue checks c and posts it, or keeps it for the end of the thread's
// NCCL group.
static int enqueue(call c, const char *what) {
	pthread_mutex_lock(&mu);
	int rc = check_comm(c.comm, what);
	if (rc == ncclSuccess && (c.comm->polls > 0 || !ready(c.comm))) {
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
	    (c.root < 0 || c.root >= c.comm->nranks)) {
		record("%s: peer or root %d in a communicator of %d", what, c.root, c.comm->nranks);
		rc = ncclInvalidArgument;
	}
	if (rc == ncclSuccess && c.op >= oNumOps && (c.kind == kAllReduce || c.kind == kReduce || c.kind == kReduceScatter)) {
		int i = c.op - oNumOps;
		if (i >= MAX_PREMUL || !premuls[i].live) {
			record("%s: op %d is not a live op", what, c.op);
			rc = ncclInvalidArgument;
		} else {
			c.scalar = premuls[i].scalar; // NCCL takes the op's scalar at the call
		}
	}
	if (rc == ncclSuccess) {
		check_dev(c.comm->dev, what);
		if (group_depth > 0) {
			if (npending == MAX_PENDING) {
				record("%s: too many calls in one group", what);
				rc = ncclInternalError;
			} else {
				pending[npending++] = c;
			}
		} else if ((c.kind == kSend || c.kind == kRecv) && c.root == c.comm->rank) {
			record("%s: to self outside a group (would hang)", what);
			rc = ncclInvalidUsage;
		} else {
			post(&c, 1);
		}
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

static call mk(int kind, const void *send, void *recv, size_t count, int dtype, int op, int root, void *comm,
               void *stream) {
	call c = {kind, dtype, op, root, send, recv, count, 1.0, comm, NULL};
	c.stream = stream_of(stream);
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

// ncclGroupEnd posts the group's calls, one entry per communicator. Like a
// non-blocking communicator's, it answers ncclInProgress, and the
// communicators settle after one more ncclCommGetAsyncError (never while
// the fake hangs: they stay in progress until aborted, as when a peer
// never joins).
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
	int n = npending;
	npending = 0;
	call calls[MAX_PENDING];
	int taken[MAX_PENDING] = {0};
	for (int i = 0; i < n; i++) {
		if (taken[i]) continue;
		int k = 0;
		for (int j = i; j < n; j++) {
			if (!taken[j] && pending[j].comm == pending[i].comm) {
				taken[j] = 1;
				calls[k++] = pending[j];
			}
		}
		calls[0].comm->polls = hang ? 1 << 30 : 1;
		post(calls, k);
	}
	pthread_mutex_unlock(&mu);
	return n > 0 ? ncclInProgress : ncclSuccess;
}
