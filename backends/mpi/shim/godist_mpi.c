// godist_mpi.c: godist_mpi.h on MPI. One source, compiled once per MPI
// implementation with that implementation's mpicc:
//
//   mpicc.openmpi -shared -fPIC -O2 -o libgodist_mpi_openmpi.so godist_mpi.c
//   mpicc.mpich   -shared -fPIC -O2 -o libgodist_mpi_mpich.so   godist_mpi.c
//
// Communicators and requests live in growable tables guarded by one mutex,
// since calls may come from several threads (MPI_THREAD_MULTIPLE). MPI
// calls themselves run outside the mutex, except MPI_Test of abandoned
// requests (non-blocking). godist's element types and reduce ops on MPI,
// bit for bit as godist's Go kernels, are in godist_mpi_reduce.h.
#include "godist_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "godist_mpi_reduce.h"

// ---- state

enum { REQ_FREE = 0, REQ_LIVE = 1, REQ_ABANDONED = 2 };

typedef struct {
	MPI_Request r;
	int state;
	int is_recv;
	int is_coll;
	int *arrays; // int counts/displacements the request uses (freed when it completes)
} req_entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int ready;                 // datatypes and ops made
static MPI_Comm *comms;           // comms[0] is MPI_COMM_WORLD; MPI_COMM_NULL marks a free slot
static int ncomms;
static req_entry *reqs; // request id i+1 is reqs[i]
static int64_t nreqs;
static int nabandoned;

static int mpi_up(void) {
	int init = 0, fin = 0;
	MPI_Initialized(&init);
	MPI_Finalized(&fin);
	return init && !fin;
}

// setup makes the shim's datatypes and ops (once, with mu held); MPI may
// have been initialised by someone else (mpi4py, torch's mpi backend).
static int setup_locked(void) {
	if (ready) {
		return 0;
	}
	if (!mpi_up()) {
		return GM_ERR_NOT_INIT;
	}
	int rc;
	if ((rc = reduce_setup()) != 0) return rc;
	if (comms == NULL) {
		comms = malloc(sizeof(MPI_Comm) * 8);
		if (comms == NULL) return MPI_ERR_NO_MEM;
		ncomms = 8;
		for (int i = 0; i < ncomms; i++) comms[i] = MPI_COMM_NULL;
	}
	comms[0] = MPI_COMM_WORLD;
	// Errors come back as return codes rather than aborting the job.
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	ready = 1;
	return 0;
}

static int setup(void) {
	pthread_mutex_lock(&mu);
	int rc = setup_locked();
	pthread_mutex_unlock(&mu);
	return rc;
}

// get_comm looks up a communicator id.
static int get_comm(int id, MPI_Comm *c) {
	pthread_mutex_lock(&mu);
	int rc = setup_locked();
	if (rc == 0) {
		if (id < 0 || id >= ncomms || comms[id] == MPI_COMM_NULL) {
			rc = GM_ERR_ARG;
		} else {
			*c = comms[id];
		}
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

// add_req stores a started request and returns its id in *id; on failure
// to grow the table the request is left running and its arrays leak (MPI
// may still read them).
static int add_req(MPI_Request r, int is_recv, int is_coll, int *arrays, int64_t *id) {
	pthread_mutex_lock(&mu);
	int64_t slot = -1;
	for (int64_t i = 0; i < nreqs; i++) {
		if (reqs[i].state == REQ_FREE) {
			slot = i;
			break;
		}
	}
	if (slot < 0) {
		int64_t n = nreqs ? nreqs * 2 : 64;
		req_entry *g = realloc(reqs, sizeof(req_entry) * (size_t)n);
		if (g == NULL) {
			pthread_mutex_unlock(&mu);
			return MPI_ERR_NO_MEM;
		}
		memset(g + nreqs, 0, sizeof(req_entry) * (size_t)(n - nreqs));
		slot = nreqs;
		reqs = g;
		nreqs = n;
	}
	reqs[slot] = (req_entry){r, REQ_LIVE, is_recv, is_coll, arrays};
	*id = slot + 1;
	pthread_mutex_unlock(&mu);
	return 0;
}

// sweep_locked tests abandoned requests and frees the finished ones.
static void sweep_locked(void) {
	if (nabandoned == 0) return;
	for (int64_t i = 0; i < nreqs; i++) {
		if (reqs[i].state != REQ_ABANDONED) continue;
		int flag = 0;
		if (MPI_Test(&reqs[i].r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
			free(reqs[i].arrays);
			reqs[i] = (req_entry){0};
			reqs[i].state = REQ_FREE;
			nabandoned--;
		}
	}
}

static int fits(int64_t n) { return n >= 0 && n <= INT_MAX; }

// reduction_args resolves the communicator, datatype and op of a reduction.
static int reduction_args(int comm, int64_t count, int dtype, int op, MPI_Comm *c, MPI_Datatype *t, MPI_Op *o) {
	int rc = get_comm(comm, c);
	if (rc) return rc;
	if (!fits(count)) return GM_ERR_ARG;
	if ((rc = map_dtype(dtype, t))) return rc;
	return map_op(dtype, op, o);
}

// ---- API

int gm_abi_version(void) { return GM_ABI_VERSION; }

const char *gm_impl(void) {
#if defined(OPEN_MPI)
	return "openmpi";
#elif defined(MPICH)
	return "mpich";
#else
	return "unknown";
#endif
}

int gm_library_version(char *buf, int len) {
	if (buf == NULL || len <= 0) return GM_ERR_ARG;
	char v[MPI_MAX_LIBRARY_VERSION_STRING];
	int n = 0;
	int rc = MPI_Get_library_version(v, &n);
	if (rc != MPI_SUCCESS) return rc;
	v[n < MPI_MAX_LIBRARY_VERSION_STRING ? n : MPI_MAX_LIBRARY_VERSION_STRING - 1] = 0;
	snprintf(buf, (size_t)len, "%s", v);
	return 0;
}

void gm_error_string(int rc, char *buf, int len) {
	if (buf == NULL || len <= 0) return;
	switch (rc) {
	case 0: snprintf(buf, (size_t)len, "success"); return;
	case GM_ERR_ARG: snprintf(buf, (size_t)len, "GM_ERR_ARG: argument refused by the godist MPI shim"); return;
	case GM_ERR_NOT_INIT: snprintf(buf, (size_t)len, "GM_ERR_NOT_INIT: MPI is not initialised or already finalised"); return;
	}
	if (!mpi_up()) {
		snprintf(buf, (size_t)len, "MPI error %d", rc);
		return;
	}
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;
	if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) {
		snprintf(buf, (size_t)len, "MPI error %d", rc);
		return;
	}
	s[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING - 1] = 0;
	snprintf(buf, (size_t)len, "%s", s);
}

int gm_initialized(int *flag) { return MPI_Initialized(flag); }
int gm_finalized(int *flag) { return MPI_Finalized(flag); }

int gm_init_thread(int required, int *provided) {
	static const int levels[4] = {MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE};
	if (required < 0 || required > 3 || provided == NULL) return GM_ERR_ARG;
	int p = 0;
	int rc = MPI_Init_thread(NULL, NULL, levels[required], &p);
	if (rc != MPI_SUCCESS) return rc;
	*provided = 0;
	for (int i = 0; i < 4; i++) {
		if (levels[i] == p) *provided = i;
	}
	return setup();
}

int gm_finalize(void) {
	if (!mpi_up()) return GM_ERR_NOT_INIT;
	pthread_mutex_lock(&mu);
	if (ready) {
		for (int i = 1; i < ncomms; i++) {
			if (comms[i] != MPI_COMM_NULL) MPI_Comm_free(&comms[i]);
		}
		for (int i = 0; i < 2; i++) {
			for (int j = 0; j < 4; j++) MPI_Op_free(&half_ops[i][j]);
			MPI_Type_free(&half_type[i]);
		}
		for (int i = 0; i < NUM_FIX; i++) MPI_Op_free(&fix_ops[i]);
		ready = 0;
	}
	for (int64_t i = 0; i < nreqs; i++) {
		// Requests still live are the caller's mistake; their arrays stay
		// (MPI may read them until MPI_Finalize).
		if (reqs[i].state == REQ_ABANDONED) {
			int flag = 0;
			MPI_Test(&reqs[i].r, &flag, MPI_STATUS_IGNORE);
		}
	}
	pthread_mutex_unlock(&mu);
	return MPI_Finalize();
}

int gm_query_thread(int *provided) {
	int p = 0, rc = MPI_Query_thread(&p);
	if (rc != MPI_SUCCESS) return rc;
	*provided = p == MPI_THREAD_MULTIPLE ? 3 : p == MPI_THREAD_SERIALIZED ? 2 : p == MPI_THREAD_FUNNELED ? 1 : 0;
	return 0;
}

int gm_is_thread_main(int *flag) { return MPI_Is_thread_main(flag); }

int gm_world(int *rank, int *size) {
	int rc = setup();
	if (rc) return rc;
	if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, rank)) != MPI_SUCCESS) return rc;
	return MPI_Comm_size(MPI_COMM_WORLD, size);
}

int gm_tag_ub(int *ub) {
	int rc = setup();
	if (rc) return rc;
	int *v = NULL, flag = 0;
	if ((rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag)) != MPI_SUCCESS) return rc;
	*ub = flag && v ? *v : 32767;
	return 0;
}

int gm_processor_name(char *buf, int len) {
	if (buf == NULL || len <= 0) return GM_ERR_ARG;
	char s[MPI_MAX_PROCESSOR_NAME];
	int n = 0, rc = MPI_Get_processor_name(s, &n);
	if (rc != MPI_SUCCESS) return rc;
	s[n < MPI_MAX_PROCESSOR_NAME ? n : MPI_MAX_PROCESSOR_NAME - 1] = 0;
	snprintf(buf, (size_t)len, "%s", s);
	return 0;
}

int gm_comm_create(const int *world_ranks, int n, int tag, int *id) {
	if (n <= 0 || world_ranks == NULL || id == NULL) return GM_ERR_ARG;
	int rc = setup();
	if (rc) return rc;
	MPI_Group world, g;
	if ((rc = MPI_Comm_group(MPI_COMM_WORLD, &world)) != MPI_SUCCESS) return rc;
	rc = MPI_Group_incl(world, n, world_ranks, &g);
	MPI_Group_free(&world);
	if (rc != MPI_SUCCESS) return rc;
	MPI_Comm c = MPI_COMM_NULL;
	rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &c);
	MPI_Group_free(&g);
	if (rc != MPI_SUCCESS) return rc;
	if (c == MPI_COMM_NULL) return GM_ERR_ARG; // the caller is not among world_ranks
	MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
	pthread_mutex_lock(&mu);
	int slot = -1;
	for (int i = 1; i < ncomms; i++) {
		if (comms[i] == MPI_COMM_NULL) {
			slot = i;
			break;
		}
	}
	if (slot < 0) {
		MPI_Comm *g2 = realloc(comms, sizeof(MPI_Comm) * (size_t)ncomms * 2);
		if (g2 == NULL) {
			pthread_mutex_unlock(&mu);
			MPI_Comm_free(&c);
			return MPI_ERR_NO_MEM;
		}
		for (int i = ncomms; i < ncomms * 2; i++) g2[i] = MPI_COMM_NULL;
		slot = ncomms;
		comms = g2;
		ncomms *= 2;
	}
	comms[slot] = c;
	*id = slot;
	pthread_mutex_unlock(&mu);
	return 0;
}

int gm_test(int64_t req, int *done, int *source, int64_t *nbytes) {
	if (done == NULL) return GM_ERR_ARG;
	*done = 0;
	pthread_mutex_lock(&mu);
	sweep_locked();
	if (req < 1 || req > nreqs || reqs[req - 1].state != REQ_LIVE) {
		pthread_mutex_unlock(&mu);
		return GM_ERR_ARG;
	}
	req_entry e = reqs[req - 1];
	pthread_mutex_unlock(&mu);

	MPI_Status st;
	int flag = 0;
	int rc = MPI_Test(&e.r, &flag, &st);
	if (rc != MPI_SUCCESS && !flag) {
		// A failed request is complete (MPI sets it to MPI_REQUEST_NULL for
		// non-persistent requests); free its entry all the same.
		flag = 1;
	}
	if (!flag) return rc;
	int src = -1;
	int64_t nb = 0;
	if (e.is_recv && rc == MPI_SUCCESS) {
		int cnt = 0;
		src = st.MPI_SOURCE;
		if (MPI_Get_count(&st, MPI_BYTE, &cnt) == MPI_SUCCESS && cnt != MPI_UNDEFINED) nb = cnt;
	}
	pthread_mutex_lock(&mu);
	free(reqs[req - 1].arrays);
	reqs[req - 1] = (req_entry){0};
	reqs[req - 1].state = REQ_FREE;
	pthread_mutex_unlock(&mu);
	*done = 1;
	if (source) *source = src;
	if (nbytes) *nbytes = nb;
	return rc;
}

int gm_abandon(int64_t req) {
	pthread_mutex_lock(&mu);
	if (req < 1 || req > nreqs || reqs[req - 1].state != REQ_LIVE) {
		pthread_mutex_unlock(&mu);
		return GM_ERR_ARG;
	}
	req_entry *e = &reqs[req - 1];
	int rc = 0;
	if (e->is_coll || e->is_recv) {
		// A collective cannot be freed or cancelled (MPI-3.1 §5.12): it is
		// kept and tested by later gm_test/gm_abandon calls until it ends.
		// A receive is cancelled and likewise kept until the cancel ends.
		if (e->is_recv) rc = MPI_Cancel(&e->r);
		e->state = REQ_ABANDONED;
		nabandoned++;
	} else {
		rc = MPI_Request_free(&e->r);
		free(e->arrays);
		*e = (req_entry){0};
		e->state = REQ_FREE;
	}
	sweep_locked();
	pthread_mutex_unlock(&mu);
	return rc;
}

int gm_bcast(int comm, void *buf, int64_t nbytes, int root) {
	MPI_Comm c;
	int rc = get_comm(comm, &c);
	if (rc) return rc;
	if (!fits(nbytes)) return GM_ERR_ARG;
	return MPI_Bcast(buf, (int)nbytes, MPI_BYTE, root, c);
}

#define START(call, is_recv, is_coll, arrays)                      \
	do {                                                           \
		MPI_Request r_ = MPI_REQUEST_NULL;                         \
		int rc_ = (call);                                          \
		if (rc_ != MPI_SUCCESS) {                                  \
			free(arrays);                                          \
			return rc_;                                            \
		}                                                          \
		return add_req(r_, is_recv, is_coll, arrays, req);         \
	} while (0)
#define R (&r_)

int gm_iallreduce(int comm, void *buf, int64_t count, int dtype, int op, int64_t *req) {
	MPI_Comm c;
	MPI_Datatype t;
	MPI_Op o;
	int rc = reduction_args(comm, count, dtype, op, &c, &t, &o);
	if (rc) return rc;
	START(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, t, o, c, R), 0, 1, NULL);
}

int gm_ireduce(int comm, void *buf, int64_t count, int dtype, int op, int root, int64_t *req) {
	MPI_Comm c;
	MPI_Datatype t;
	MPI_Op o;
	int rc = reduction_args(comm, count, dtype, op, &c, &t, &o);
	if (rc) return rc;
	int me = 0;
	if ((rc = MPI_Comm_rank(c, &me)) != MPI_SUCCESS) return rc;
	if (me == root) {
		START(MPI_Ireduce(MPI_IN_PLACE, buf, (int)count, t, o, root, c, R), 0, 1, NULL);
	}
	START(MPI_Ireduce(buf, NULL, (int)count, t, o, root, c, R), 0, 1, NULL);
}

int gm_ireduce_scatter_block(int comm, const void *in, void *out, int64_t count, int dtype, int op, int64_t *req) {
	MPI_Comm c;
	MPI_Datatype t;
	MPI_Op o;
	int rc = reduction_args(comm, count, dtype, op, &c, &t, &o);
	if (rc) return rc;
	START(MPI_Ireduce_scatter_block(in, out, (int)count, t, o, c, R), 0, 1, NULL);
}

int gm_ibcast(int comm, void *buf, int64_t nbytes, int root, int64_t *req) {
	MPI_Comm c;
	int rc = get_comm(comm, &c);
	if (rc) return rc;
	if (!fits(nbytes)) return GM_ERR_ARG;
	START(MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, root, c, R), 0, 1, NULL);
}

int gm_iallgather(int comm, const void *in, void *out, int64_t nbytes, int64_t *req) {
	MPI_Comm c;
	int rc = get_comm(comm, &c);
	if (rc) return rc;
	if (!fits(nbytes)) return GM_ERR_ARG;
	int me = 0;
	if ((rc = MPI_Comm_rank(c, &me)) != MPI_SUCCESS) return rc;
	const void *src = in;
	if (nbytes > 0 && in == (const char *)out + (int64_t)me * nbytes) src = MPI_IN_PLACE;
	START(MPI_Iallgather(src, (int)nbytes, MPI_BYTE, out, (int)nbytes, MPI_BYTE, c, R), 0, 1, NULL);
}

// int_arrays converts k int64 arrays of n entries each into one allocation
// of k*n ints; NULL arrays become zeros. GM_ERR_ARG if any entry does not
// fit an int.
static int int_arrays(int n, int k, const int64_t *const *src, int **out) {
	int *a = malloc(sizeof(int) * (size_t)(n > 0 ? n * k : 1));
	if (a == NULL) return MPI_ERR_NO_MEM;
	for (int j = 0; j < k; j++) {
		for (int i = 0; i < n; i++) {
			int64_t v = src[j] ? src[j][i] : 0;
			if (!fits(v)) {
				free(a);
				return GM_ERR_ARG;
			}
			a[j * n + i] = (int)v;
		}
	}
	*out = a;
	return 0;
}

int gm_ialltoallv(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out,
                  const int64_t *rcounts, const int64_t *rdispls, int64_t *req) {
	MPI_Comm c;
	int rc = get_comm(comm, &c);
	if (rc) return rc;
	int n = 0;
	if ((rc = MPI_Comm_size(c, &n)) != MPI_SUCCESS) return rc;
	if (!scounts || !sdispls || !rcounts || !rdispls) return GM_ERR_ARG;
	const int64_t *src[4] = {scounts, sdispls, rcounts, rdispls};
	int *a = NULL;
	if ((rc = int_arrays(n, 4, src, &a))) return rc;
	START(MPI_Ialltoallv(in, a, a + n, MPI_BYTE, out, a + 2 * n, a + 3 * n, MPI_BYTE, c, R), 0, 1, a);
}

// rooted_args prepares a gatherv or scatterv: the communicator, its size,
// and at the root (*at_root) the per-rank counts and displacements as ints
// (*a, NULL elsewhere).
static int rooted_args(int comm, int64_t nbytes, const int64_t *counts, const int64_t *displs, int root, MPI_Comm *c,
                       int *n, int *at_root, int **a) {
	int rc = get_comm(comm, c);
	if (rc) return rc;
	if (!fits(nbytes)) return GM_ERR_ARG;
	int me = 0;
	if ((rc = MPI_Comm_size(*c, n)) != MPI_SUCCESS) return rc;
	if ((rc = MPI_Comm_rank(*c, &me)) != MPI_SUCCESS) return rc;
	*a = NULL;
	*at_root = me == root;
	if (!*at_root) return 0;
	if (!counts || !displs) return GM_ERR_ARG;
	const int64_t *src[2] = {counts, displs};
	return int_arrays(*n, 2, src, a);
}

int gm_igatherv(int comm, const void *in, int64_t nbytes, void *out, const int64_t *rcounts, const int64_t *rdispls,
                int root, int64_t *req) {
	MPI_Comm c;
	int n = 0, at_root = 0, *a = NULL;
	int rc = rooted_args(comm, nbytes, rcounts, rdispls, root, &c, &n, &at_root, &a);
	if (rc) return rc;
	if (at_root) {
		START(MPI_Igatherv(in, (int)nbytes, MPI_BYTE, out, a, a + n, MPI_BYTE, root, c, R), 0, 1, a);
	}
	START(MPI_Igatherv(in, (int)nbytes, MPI_BYTE, NULL, NULL, NULL, MPI_BYTE, root, c, R), 0, 1, a);
}

int gm_iscatterv(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out, int64_t nbytes,
                 int root, int64_t *req) {
	MPI_Comm c;
	int n = 0, at_root = 0, *a = NULL;
	int rc = rooted_args(comm, nbytes, scounts, sdispls, root, &c, &n, &at_root, &a);
	if (rc) return rc;
	if (at_root) {
		START(MPI_Iscatterv(in, a, a + n, MPI_BYTE, out, (int)nbytes, MPI_BYTE, root, c, R), 0, 1, a);
	}
	START(MPI_Iscatterv(NULL, NULL, NULL, MPI_BYTE, out, (int)nbytes, MPI_BYTE, root, c, R), 0, 1, a);
}

int gm_ibarrier(int comm, int64_t *req) {
	MPI_Comm c;
	int rc = get_comm(comm, &c);
	if (rc) return rc;
	START(MPI_Ibarrier(c, R), 0, 1, NULL);
}

int gm_isend(int comm, const void *buf, int64_t nbytes, int peer, int tag, int64_t *req) {
	MPI_Comm c;
	int rc = get_comm(comm, &c);
	if (rc) return rc;
	if (!fits(nbytes) || peer < 0 || tag < 0) return GM_ERR_ARG;
	START(MPI_Isend(buf, (int)nbytes, MPI_BYTE, peer, tag, c, R), 0, 0, NULL);
}

int gm_irecv(int comm, void *buf, int64_t nbytes, int peer, int tag, int64_t *req) {
	MPI_Comm c;
	int rc = get_comm(comm, &c);
	if (rc) return rc;
	if (!fits(nbytes) || peer < -1 || tag < 0) return GM_ERR_ARG;
	START(MPI_Irecv(buf, (int)nbytes, MPI_BYTE, peer == -1 ? MPI_ANY_SOURCE : peer, tag, c, R), 1, 0, NULL);
}
