// loader.h: godist_mpi.h's functions reached through pointers resolved at
// run time (gml_load), so that libgodist.so never links MPI. Each gml_
// function calls the shim's gm_ function of the same name; before
// gml_load succeeds they return GML_NOT_LOADED.
#ifndef GODIST_MPI_LOADER_H
#define GODIST_MPI_LOADER_H

#include <stdint.h>

#define GML_NOT_LOADED 100003

// gml_open_mpi dlopens the MPI implementation's library name (a soname
// the dynamic loader searches for, or a path) RTLD_NOW | RTLD_GLOBAL, so
// that the shim, which links no MPI library, finds MPI's symbols in the
// global scope when gml_load opens it. The library stays loaded. 0 on
// success; otherwise err holds dlerror's text.
int gml_open_mpi(const char *name, char *err, int errlen);

// gml_load dlopens path (RTLD_NOW | RTLD_GLOBAL: Open MPI's components
// need libmpi's symbols in the global scope) and resolves every gm_
// function. 0 on success; otherwise err holds dlerror's text or the
// missing symbol.
int gml_load(const char *path, char *err, int errlen);

int gml_abi_version(void);
const char *gml_impl(void);
int gml_library_version(char *buf, int len);
void gml_error_string(int rc, char *buf, int len);
int gml_initialized(int *flag);
int gml_finalized(int *flag);
int gml_init_thread(int required, int *provided);
int gml_finalize(void);
int gml_query_thread(int *provided);
int gml_is_thread_main(int *flag);
int gml_world(int *rank, int *size);
int gml_tag_ub(int *ub);
int gml_processor_name(char *buf, int len);
int gml_comm_create(const int *world_ranks, int n, int tag, int *id);
int gml_test(int64_t req, int *done, int *source, int64_t *nbytes);
int gml_abandon(int64_t req);
int gml_bcast(int comm, void *buf, int64_t nbytes, int root);
int gml_iallreduce(int comm, void *buf, int64_t count, int dtype, int op, int64_t *req);
int gml_ireduce(int comm, void *buf, int64_t count, int dtype, int op, int root, int64_t *req);
int gml_ireduce_scatter_block(int comm, const void *in, void *out, int64_t count, int dtype, int op, int64_t *req);
int gml_ibcast(int comm, void *buf, int64_t nbytes, int root, int64_t *req);
int gml_iallgather(int comm, const void *in, void *out, int64_t nbytes, int64_t *req);
int gml_ialltoallv(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out,
                   const int64_t *rcounts, const int64_t *rdispls, int64_t *req);
int gml_igatherv(int comm, const void *in, int64_t nbytes, void *out, const int64_t *rcounts, const int64_t *rdispls,
                 int root, int64_t *req);
int gml_iscatterv(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out, int64_t nbytes,
                  int root, int64_t *req);
int gml_ibarrier(int comm, int64_t *req);
int gml_isend(int comm, const void *buf, int64_t nbytes, int peer, int tag, int64_t *req);
int gml_irecv(int comm, void *buf, int64_t nbytes, int peer, int tag, int64_t *req);

#endif
