// fake.h: what fake_nccl.c (NCCL) and fake_cuda.c (the CUDA runtime and
// the test controls) share. See fake_nccl.c for the model.
#ifndef GODIST_FAKE_H
#define GODIST_FAKE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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

#define NDEV 2      // devices the fake runtime reports
#define MAX_DEPS 4  // unfinished work a stream or event waits for
#define MAX_RANKS 8 // ranks of a communicator

struct fop;

// fdeps is unfinished work: what a stream's next work waits for, or what
// an event stands for.
typedef struct {
	struct fop *p[MAX_DEPS];
	int n;
} fdeps;

typedef struct fclique fclique;

typedef struct fcomm {
	int nranks, rank, dev;
	int polls; // GetAsyncError answers ncclInProgress this many more times
	int dead;  // aborted or destroyed: any further use is an error
	int finalized;
	fclique *clique;
	int magic;
} fcomm;
#define COMM_MAGIC 0x5eed

typedef struct fstream {
	fdeps last; // the unfinished work queued on it
	int dev;
	int magic;
} fstream;
#define STREAM_MAGIC 0x57ea

typedef struct fevent {
	fdeps waiting; // not done until all of it is done (or its communicators aborted)
	int dev;
	int magic;
} fevent;
#define EVENT_MAGIC 0xe7e7

// call is one NCCL call; scalar is a PREMUL_SUM op's factor (op >= oNumOps).
typedef struct {
	int kind, dtype, op, root;
	const void *send;
	void *recv;
	size_t count;
	double scalar;
	fcomm *comm;
	fstream *stream;
} call;

// fop is one rank's unit of work on one communicator: a call, or the
// calls of one NCCL group on that communicator. The ranks' fops at the
// same position of a communicator run together, once each rank has posted
// its own and the work each waits for is done.
typedef struct fop {
	call *calls;
	int n;
	fdeps deps;
	int done;
	int stuck; // posted while the fake hangs: never done
	fcomm *comm;
	struct fop *next; // the rank's next fop on the communicator
} fop;

// fclique is a communicator's ranks: head[r] .. tail[r] are rank r's
// fops not yet run, in order.
struct fclique {
	char id[12];
	int nranks, joined;
	fcomm *comms[MAX_RANKS];
	fop *head[MAX_RANKS], *tail[MAX_RANKS];
	int stuck; // mismatched work: nothing more runs on it
};

#define MAX_CLIQUES 64
extern fclique cliques[MAX_CLIQUES];
extern int ncliques;

extern pthread_mutex_t mu;
extern int64_t n_aborts, n_destroys, n_finalizes, n_group_starts, n_premul_live, n_events_live, n_streams_live,
	n_comms_live, n_errors, n_collectives;
extern int hang, async_error;
extern __thread int cur_dev;

void record(const char *fmt, ...);
int pending_deps(fdeps *d);              // drops finished work from d; says whether any is left
void add_dep(fdeps *d, fop *p);          // mu held
fstream *stream_of(void *s);             // mu held
int check_dev(int dev, const char *what); // records a call on the wrong device; mu held
void post(call *calls, int n);           // queues one rank's entry on calls[0].comm and runs what can run; mu held

#endif
