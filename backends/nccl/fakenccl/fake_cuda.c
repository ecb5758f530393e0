//go:build ignore

// fake_cuda.c: the fake CUDA runtime (events, streams, devices) and the
// test controls; see fake_nccl.c. The current device is per thread, as in
// CUDA, and starts at 0; a stream or event belongs to the device current
// when it was made, and a call on it while another device is current is
// recorded as misuse (on a host with several GPUs it would open a context
// on the wrong one).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
int hang, async_error;
__thread int cur_dev;
int64_t n_aborts, n_destroys, n_finalizes, n_group_starts, n_premul_live, n_events_live, n_streams_live,
	n_comms_live, n_errors, n_collectives;
static char errors[4096];
static fstream default_streams[NDEV] = {{{{0}, 0}, 0, STREAM_MAGIC}, {{{0}, 0}, 1, STREAM_MAGIC}};

void record(const char *fmt, ...) {
	n_errors++;
	size_t used = strlen(errors);
	if (used + 2 >= sizeof errors) return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errors + used, sizeof errors - used - 1, fmt, ap);
	va_end(ap);
	strcat(errors, "\n");
}

int check_dev(int dev, const char *what) {
	if (dev != cur_dev) {
		record("%s: on an object of cuda:%d while cuda:%d is current", what, dev, cur_dev);
		return 1;
	}
	return 0;
}

// unfinished is whether p still holds back work: not done, and its
// communicator not aborted.
static int unfinished(fop *p) { return !p->done && !p->comm->dead; }

int pending_deps(fdeps *d) {
	int k = 0;
	for (int i = 0; i < d->n; i++) {
		if (unfinished(d->p[i])) d->p[k++] = d->p[i];
	}
	d->n = k;
	return k > 0;
}

void add_dep(fdeps *d, fop *p) {
	pending_deps(d);
	for (int i = 0; i < d->n; i++) {
		if (d->p[i] == p) return;
	}
	if (d->n == MAX_DEPS) {
		record("the fake tracks at most %d unfinished ops per stream or event", MAX_DEPS);
		return;
	}
	d->p[d->n++] = p;
}

fstream *stream_of(void *s) { return s == NULL ? &default_streams[cur_dev] : (fstream *)s; }

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

// fake_stream makes a stream of device dev, as a caller's current stream
// (the calling thread's device is left as it was).
EXPORT void *fake_stream(int dev) {
	fstream *f = calloc(1, sizeof *f);
	f->dev = dev;
	f->magic = STREAM_MAGIC;
	return f;
}

// --- CUDA runtime -----------------------------------------------------------

EXPORT int cudaRuntimeGetVersion(int *v) {
	*v = 13000;
	return cudaSuccess;
}

EXPORT int cudaGetDeviceCount(int *n) {
	*n = NDEV;
	return cudaSuccess;
}

EXPORT int cudaSetDevice(int dev) {
	if (dev < 0 || dev >= NDEV) return cudaErrorInvalidDevice;
	cur_dev = dev;
	return cudaSuccess;
}

EXPORT int cudaGetDevice(int *dev) {
	*dev = cur_dev;
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
	fstream *f = fake_stream(cur_dev);
	pthread_mutex_lock(&mu);
	n_streams_live++;
	pthread_mutex_unlock(&mu);
	*s = f;
	return cudaSuccess;
}

EXPORT int cudaStreamDestroy(void *s) {
	fstream *f = s;
	pthread_mutex_lock(&mu);
	if (f == NULL || f->magic != STREAM_MAGIC) {
		record("cudaStreamDestroy: not a stream");
		pthread_mutex_unlock(&mu);
		return 400;
	}
	check_dev(f->dev, "cudaStreamDestroy");
	n_streams_live--;
	f->magic = 0; // never freed, so that a second destroy is recorded
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

static int check_event(fevent *e, const char *what) {
	if (e == NULL || e->magic != EVENT_MAGIC) {
		record("%s: not an event", what);
		return 400;
	}
	check_dev(e->dev, what);
	return cudaSuccess;
}

EXPORT int cudaEventCreateWithFlags(void **ev, unsigned flags) {
	(void)flags;
	fevent *e = calloc(1, sizeof *e);
	e->magic = EVENT_MAGIC;
	e->dev = cur_dev;
	pthread_mutex_lock(&mu);
	n_events_live++;
	pthread_mutex_unlock(&mu);
	*ev = e;
	return cudaSuccess;
}

EXPORT int cudaEventRecord(void *ev, void *s) {
	pthread_mutex_lock(&mu);
	int rc = check_event(ev, "cudaEventRecord");
	if (rc == cudaSuccess) {
		fstream *f = stream_of(s);
		check_dev(f->dev, "cudaEventRecord (stream)");
		pending_deps(&f->last);
		((fevent *)ev)->waiting = f->last;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT int cudaStreamWaitEvent(void *s, void *ev, unsigned flags) {
	(void)flags;
	pthread_mutex_lock(&mu);
	int rc = check_event(ev, "cudaStreamWaitEvent");
	if (rc == cudaSuccess) {
		fevent *e = ev;
		fstream *f = stream_of(s);
		pending_deps(&e->waiting);
		for (int i = 0; i < e->waiting.n; i++) add_dep(&f->last, e->waiting.p[i]);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT int cudaEventQuery(void *ev) {
	pthread_mutex_lock(&mu);
	int rc = check_event(ev, "cudaEventQuery");
	if (rc == cudaSuccess && pending_deps(&((fevent *)ev)->waiting)) rc = cudaErrorNotReady;
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
