// godist_mpi.h: the C API of godist's MPI shims. One shim is built per MPI
// implementation with that implementation's mpicc's compile flags
// (libgodist_mpi_openmpi.so, libgodist_mpi_mpich.so) and linked without its
// MPI library, whose symbols it leaves undefined; backends/mpi loads the
// MPI library and then the shim that matches the launcher at run time (both
// RTLD_GLOBAL), so neither libgodist.so nor the shims link MPI.
//
// Every function returns 0 (MPI_SUCCESS) or an MPI error code (or a GM_
// code below); gm_error_string names it. Communicators and requests are
// integers of tables kept in the shim, so callers never see MPI's handle
// types (which differ between implementations). Communicator 0 is
// MPI_COMM_WORLD. dtype is godist's dtype code (libgodist/reduce/dtype.go:
// 0 float16, 1 bfloat16, 2 float32, 3 float64, 4 complex64, 5 complex128,
// 6 int8, 7 uint8, 8 int16, 9 int32, 10 int64, 11 bool); op is c10d's
// reduce op (0 SUM, 2 PRODUCT, 3 MIN, 4 MAX, 5 BAND, 6 BOR, 7 BXOR; AVG
// and PREMUL_SUM are SUM plus scaling, done by the caller). Element counts
// must be at most INT_MAX (callers chunk); byte counts of data-movement
// calls likewise.
#ifndef GODIST_MPI_H
#define GODIST_MPI_H

#include <stdint.h>

#define GM_ABI_VERSION 1

// Error codes of the shim itself, above every MPI error class.
#define GM_ERR_ARG 100001      // an argument the shim refuses (bad dtype/op pair, count too large, unknown handle)
#define GM_ERR_NOT_INIT 100002 // MPI is not initialised (or already finalised)

int gm_abi_version(void);
// "openmpi" or "mpich": the implementation the shim was built against.
const char *gm_impl(void);
// MPI_Get_library_version's text (truncated to len, NUL-terminated).
int gm_library_version(char *buf, int len);
void gm_error_string(int rc, char *buf, int len);

int gm_initialized(int *flag);
int gm_finalized(int *flag);
// MPI_Init_thread with required (0 SINGLE, 1 FUNNELED, 2 SERIALIZED, 3
// MULTIPLE), *provided on the same scale; then the shim makes its
// datatypes and user ops (float16, bfloat16). Call once.
int gm_init_thread(int required, int *provided);
// Frees the shim's datatypes, ops, communicators, then MPI_Finalize.
int gm_finalize(void);
int gm_query_thread(int *provided);
int gm_is_thread_main(int *flag);
int gm_world(int *rank, int *size);
int gm_tag_ub(int *ub);
// MPI_Get_processor_name.
int gm_processor_name(char *buf, int len);

// MPI_Comm_create_group over MPI_COMM_WORLD's ranks world_ranks[0..n),
// collective over those ranks only; *id receives the new communicator.
int gm_comm_create(const int *world_ranks, int n, int tag, int *id);

// Requests: *req receives a request id (>= 1). gm_test completes it when
// done (*done 1), giving a receive's source and byte count; the request is
// then freed. gm_abandon frees a request that will not be waited for
// (MPI_Cancel for receives, MPI_Request_free otherwise).
int gm_test(int64_t req, int *done, int *source, int64_t *nbytes);
int gm_abandon(int64_t req);

// Blocking broadcast of bytes (rendezvous).
int gm_bcast(int comm, void *buf, int64_t nbytes, int root);

int gm_iallreduce(int comm, void *buf, int64_t count, int dtype, int op, int64_t *req);
// In place at root; other ranks' buf is only read.
int gm_ireduce(int comm, void *buf, int64_t count, int dtype, int op, int root, int64_t *req);
// in holds size*count elements; out receives count.
int gm_ireduce_scatter_block(int comm, const void *in, void *out, int64_t count, int dtype, int op, int64_t *req);
int gm_ibcast(int comm, void *buf, int64_t nbytes, int root, int64_t *req);
// out holds size*nbytes bytes, rank r's at r*nbytes.
int gm_iallgather(int comm, const void *in, void *out, int64_t nbytes, int64_t *req);
// Counts and displacements in bytes, one per rank.
int gm_ialltoallv(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out,
                  const int64_t *rcounts, const int64_t *rdispls, int64_t *req);
// out, rcounts, rdispls are read at root only.
int gm_igatherv(int comm, const void *in, int64_t nbytes, void *out, const int64_t *rcounts, const int64_t *rdispls,
                int root, int64_t *req);
// in, scounts, sdispls are read at root only.
int gm_iscatterv(int comm, const void *in, const int64_t *scounts, const int64_t *sdispls, void *out, int64_t nbytes,
                 int root, int64_t *req);
int gm_ibarrier(int comm, int64_t *req);
int gm_isend(int comm, const void *buf, int64_t nbytes, int peer, int tag, int64_t *req);
// peer -1: any source.
int gm_irecv(int comm, void *buf, int64_t nbytes, int peer, int tag, int64_t *req);

#endif
