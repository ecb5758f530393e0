// loader.c: the shim's functions through pointers (loader.h).
#include "loader.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

static struct {
	int loaded;
	int (*abi_version)(void);
	const char * (*impl)(void);
	int (*library_version)(char *buf, int len);
	void (*error_string)(int rc, char *buf, int len);
	int (*initialized)(int *flag);
	int (*finalized)(int *flag);
	int (*init_thread)(int required, int *provided);
	int (*finalize)(void);
	int (*query_thread)(int *provided);
	int (*is_thread_main)(int *flag);
	int (*world)(int *rank, int *size);
	int (*tag_ub)(int *ub);
	int (*processor_name)(char *buf, int len);
	int (*comm_create)(const int *world_ranks, int n, int tag, int *id);
	int (*test)(int64_t req, int *done, int *source, int64_t *nbytes);
	int (*abandon)(int64_t req);
	int (*bcast)(int comm, void *buf, int64_t nbytes, int root);
	int (*iallreduce)(int comm, void *buf, int64_t count, int dtype, int op, int64_t *req);
	int (*ireduce)(int comm, void *buf, int64_t count, int dtype, int op, int root, int64_t *req);
	int (*ireduce_scatter_block)(int comm, const void *in, void *out, int64_t count, int dtype, int op, int64_t *req);
	int (*ibcast)(int comm, void *buf, int64_t nbytes, int root, int64_t *req);
	int (*iallgather)(int comm, const void *in, void *out, int64_t nbytes, int64_t *req);
	int (*ialltoallv)(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out, const int64_t *rcounts, const int64_t *rdispls, int64_t *req);
	int (*igatherv)(int comm, const void *in, int64_t nbytes, void *out, const int64_t *rcounts, const int64_t *rdispls, int root, int64_t *req);
	int (*iscatterv)(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out, int64_t nbytes, int root, int64_t *req);
	int (*ibarrier)(int comm, int64_t *req);
	int (*isend)(int comm, const void *buf, int64_t nbytes, int peer, int tag, int64_t *req);
	int (*irecv)(int comm, void *buf, int64_t nbytes, int peer, int tag, int64_t *req);
} G;

#define BIND(name)                                                          \
	do {                                                                    \
		*(void **)(&G.name) = dlsym(h, "gm_" #name);                        \
		if (G.name == NULL) {                                               \
			snprintf(err, (size_t)errlen, "%s: symbol gm_%s not found", path, #name); \
			return 1;                                                       \
		}                                                                   \
	} while (0)

int gml_open_mpi(const char *name, char *err, int errlen) {
	// A library already in the process (mpi4py loaded it, or the program
	// links it) is returned, and made global if it was loaded RTLD_LOCAL.
	if (dlopen(name, RTLD_NOW | RTLD_GLOBAL) == NULL) {
		const char *e = dlerror();
		snprintf(err, (size_t)errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	return 0;
}

int gml_load(const char *path, char *err, int errlen) {
	if (G.loaded) {
		return 0;
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, (size_t)errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	BIND(abi_version);
	BIND(impl);
	BIND(library_version);
	BIND(error_string);
	BIND(initialized);
	BIND(finalized);
	BIND(init_thread);
	BIND(finalize);
	BIND(query_thread);
	BIND(is_thread_main);
	BIND(world);
	BIND(tag_ub);
	BIND(processor_name);
	BIND(comm_create);
	BIND(test);
	BIND(abandon);
	BIND(bcast);
	BIND(iallreduce);
	BIND(ireduce);
	BIND(ireduce_scatter_block);
	BIND(ibcast);
	BIND(iallgather);
	BIND(ialltoallv);
	BIND(igatherv);
	BIND(iscatterv);
	BIND(ibarrier);
	BIND(isend);
	BIND(irecv);
	G.loaded = 1;
	return 0;
}

int gml_abi_version(void) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.abi_version();
}

const char *gml_impl(void) {
	if (!G.loaded) return "";
	return G.impl();
}

int gml_library_version(char *buf, int len) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.library_version(buf, len);
}

void gml_error_string(int rc, char *buf, int len) {
	if (!G.loaded) {
		if (buf != NULL && len > 0) snprintf(buf, (size_t)len, "MPI shim not loaded");
		return;
	}
	G.error_string(rc, buf, len);
}

int gml_initialized(int *flag) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.initialized(flag);
}

int gml_finalized(int *flag) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.finalized(flag);
}

int gml_init_thread(int required, int *provided) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.init_thread(required, provided);
}

int gml_finalize(void) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.finalize();
}

int gml_query_thread(int *provided) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.query_thread(provided);
}

int gml_is_thread_main(int *flag) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.is_thread_main(flag);
}

int gml_world(int *rank, int *size) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.world(rank, size);
}

int gml_tag_ub(int *ub) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.tag_ub(ub);
}

int gml_processor_name(char *buf, int len) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.processor_name(buf, len);
}

int gml_comm_create(const int *world_ranks, int n, int tag, int *id) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.comm_create(world_ranks, n, tag, id);
}

int gml_test(int64_t req, int *done, int *source, int64_t *nbytes) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.test(req, done, source, nbytes);
}

int gml_abandon(int64_t req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.abandon(req);
}

int gml_bcast(int comm, void *buf, int64_t nbytes, int root) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.bcast(comm, buf, nbytes, root);
}

int gml_iallreduce(int comm, void *buf, int64_t count, int dtype, int op, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.iallreduce(comm, buf, count, dtype, op, req);
}

int gml_ireduce(int comm, void *buf, int64_t count, int dtype, int op, int root, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.ireduce(comm, buf, count, dtype, op, root, req);
}

int gml_ireduce_scatter_block(int comm, const void *in, void *out, int64_t count, int dtype, int op, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.ireduce_scatter_block(comm, in, out, count, dtype, op, req);
}

int gml_ibcast(int comm, void *buf, int64_t nbytes, int root, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.ibcast(comm, buf, nbytes, root, req);
}

int gml_iallgather(int comm, const void *in, void *out, int64_t nbytes, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.iallgather(comm, in, out, nbytes, req);
}

int gml_ialltoallv(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out, const int64_t *rcounts, const int64_t *rdispls, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.ialltoallv(comm, in, scounts, sdispls, out, rcounts, rdispls, req);
}

int gml_igatherv(int comm, const void *in, int64_t nbytes, void *out, const int64_t *rcounts, const int64_t *rdispls, int root, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.igatherv(comm, in, nbytes, out, rcounts, rdispls, root, req);
}

int gml_iscatterv(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out, int64_t nbytes, int root, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.iscatterv(comm, in, scounts, sdispls, out, nbytes, root, req);
}

int gml_ibarrier(int comm, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.ibarrier(comm, req);
}

int gml_isend(int comm, const void *buf, int64_t nbytes, int peer, int tag, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.isend(comm, buf, nbytes, peer, tag, req);
}

int gml_irecv(int comm, void *buf, int64_t nbytes, int peer, int tag, int64_t *req) {
	if (!G.loaded) return GML_NOT_LOADED;
	return G.irecv(comm, buf, nbytes, peer, tag, req);
}
