//go:build ignore

// fake_run.c: when the fake's queued work runs (see fake_nccl.c), and
// what it computes.
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define MAX_CLIQUE_CALLS 64

static size_t esize(int t) {
	switch (t) {
	case tInt8: case tUint8: return 1;
	case tFloat16: case tBfloat16: return 2;
	case tInt32: case tUint32: case tFloat32: return 4;
	case tInt64: case tUint64: case tFloat64: return 8;
	}
	return 0;
}

static int is_float(int t) { return t == tFloat32 || t == tFloat64; }
static int reducible(int t) { return t == tFloat32 || t == tFloat64 || t == tInt32 || t == tInt64; }

static double getf(int t, const void *p, size_t k) {
	return t == tFloat32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
}

static int64_t geti(int t, const void *p, size_t k) {
	return t == tInt32 ? (int64_t)((const int32_t *)p)[k] : ((const int64_t *)p)[k];
}

// reduce_into computes element k of the ranks' calls cs[r] (from element
// off of their send buffers) into out[k] (8 bytes per element: a double or
// an int64_t). A PREMUL_SUM scales each rank's values by its own factor.
static void reduce_into(call **cs, int nranks, size_t off, size_t n, void *out) {
	const call *c = cs[0];
	for (size_t k = 0; k < n; k++) {
		if (is_float(c->dtype)) {
			double a = 0;
			for (int r = 0; r < nranks; r++) {
				double v = getf(c->dtype, cs[r]->send, off + k);
				if (c->op >= oNumOps) v *= cs[r]->scalar;
				if (r == 0 || c->op == oSum || c->op == oAvg || c->op >= oNumOps) a = r == 0 ? v : a + v;
				else if (c->op == oProd) a *= v;
				else if (c->op == oMax) a = v > a ? v : a;
				else if (c->op == oMin) a = v < a ? v : a;
			}
			if (c->op == oAvg) a /= nranks;
			((double *)out)[k] = a;
		} else {
			int64_t a = 0;
			for (int r = 0; r < nranks; r++) {
				int64_t v = geti(c->dtype, cs[r]->send, off + k);
				if (r == 0 || c->op == oSum || c->op == oAvg) a = r == 0 ? v : a + v;
				else if (c->op == oProd) a *= v;
				else if (c->op == oMax) a = v > a ? v : a;
				else if (c->op == oMin) a = v < a ? v : a;
			}
			if (c->op == oAvg) a /= nranks;
			((int64_t *)out)[k] = a;
		}
	}
}

static void store(int t, void *dst, const void *vals, size_t n) {
	for (size_t k = 0; k < n; k++) {
		switch (t) {
		case tFloat32: ((float *)dst)[k] = (float)((const double *)vals)[k]; break;
		case tFloat64: ((double *)dst)[k] = ((const double *)vals)[k]; break;
		case tInt32: ((int32_t *)dst)[k] = (int32_t)((const int64_t *)vals)[k]; break;
		case tInt64: ((int64_t *)dst)[k] = ((const int64_t *)vals)[k]; break;
		}
	}
}

// collective runs the ranks' calls cs[r] of one collective; it returns 0,
// or 1 when they do not match.
static int collective(call **cs, int nranks) {
	const call *c = cs[0];
	for (int r = 1; r < nranks; r++) {
		int premul = c->op >= oNumOps; // each rank made its own PREMUL_SUM op
		if (cs[r]->kind != c->kind || cs[r]->count != c->count || cs[r]->dtype != c->dtype ||
		    (cs[r]->op >= oNumOps) != premul || (!premul && cs[r]->op != c->op) || cs[r]->root != c->root) {
			return 1;
		}
	}
	size_t es = esize(c->dtype), n = c->count;
	int reduction = c->kind == kAllReduce || c->kind == kReduce || c->kind == kReduceScatter;
	if (reduction && nranks == 1 && c->op < oNumOps) { // one rank's values, any dtype
		memmove(cs[0]->recv, cs[0]->send, n * es);
		return 0;
	}
	if (reduction && !reducible(c->dtype) && !(nranks == 1 && is_float(c->dtype))) {
		record("the fake reduces only float32, float64, int32 and int64 across ranks (dtype %d)", c->dtype);
		return 1;
	}
	size_t total = c->kind == kAllGather || c->kind == kReduceScatter ? n * (size_t)nranks : n;
	char *tmp = malloc(total * 8 + 1);
	switch (c->kind) {
	case kAllReduce:
	case kReduce:
		reduce_into(cs, nranks, 0, n, tmp);
		for (int r = 0; r < nranks; r++) {
			if (c->kind == kAllReduce || r == c->root) store(c->dtype, cs[r]->recv, tmp, n);
		}
		break;
	case kReduceScatter:
		reduce_into(cs, nranks, 0, total, tmp);
		for (int r = 0; r < nranks; r++) store(c->dtype, cs[r]->recv, tmp + 8 * n * (size_t)r, n);
		break;
	case kBroadcast:
		memcpy(tmp, cs[c->root]->send, n * es);
		for (int r = 0; r < nranks; r++) memcpy(cs[r]->recv, tmp, n * es);
		break;
	case kAllGather:
		for (int r = 0; r < nranks; r++) memcpy(tmp + n * es * (size_t)r, cs[r]->send, n * es);
		for (int r = 0; r < nranks; r++) memcpy(cs[r]->recv, tmp, total * es);
		break;
	}
	free(tmp);
	return 0;
}

// point_to_point matches each rank's sends to a peer with that peer's
// receives from it, in order, and copies; it returns 1 when some call has
// no partner of the same size.
static int point_to_point(fop **h, int nranks) {
	int used[MAX_RANKS][MAX_CLIQUE_CALLS] = {{0}};
	for (int a = 0; a < nranks; a++) {
		for (int i = 0; i < h[a]->n; i++) {
			call *s = &h[a]->calls[i];
			if (s->kind != kSend) continue;
			fop *hb = h[s->root];
			int j = 0;
			while (j < hb->n && (hb->calls[j].kind != kRecv || hb->calls[j].root != a || used[s->root][j])) j++;
			if (j == hb->n || j >= MAX_CLIQUE_CALLS) return 1;
			call *rv = &hb->calls[j];
			if (rv->count * esize(rv->dtype) != s->count * esize(s->dtype)) return 1;
			used[s->root][j] = 1;
			memmove(rv->recv, s->send, s->count * esize(s->dtype));
		}
	}
	for (int b = 0; b < nranks; b++) {
		for (int j = 0; j < h[b]->n && j < MAX_CLIQUE_CALLS; j++) {
			if (h[b]->calls[j].kind == kRecv && !used[b][j]) return 1;
		}
	}
	return 0;
}

// run_matched runs the ranks' entries h[r] at one position of a
// communicator; it returns 1 when they do not match.
static int run_matched(fop **h, int nranks) {
	int idx[MAX_RANKS] = {0};
	for (;;) {
		call *cs[MAX_RANKS];
		int have = 0;
		for (int r = 0; r < nranks; r++) {
			while (idx[r] < h[r]->n && (h[r]->calls[idx[r]].kind == kSend || h[r]->calls[idx[r]].kind == kRecv)) {
				idx[r]++;
			}
			cs[r] = idx[r] < h[r]->n ? &h[r]->calls[idx[r]++] : NULL;
			have += cs[r] != NULL;
		}
		if (have == 0) break;
		if (have != nranks || collective(cs, nranks) != 0) return 1;
	}
	return point_to_point(h, nranks);
}

// progress runs the communicators' next entries while some can run; mu
// held. An entry runs when every rank has posted one at that position,
// none is stuck or aborted, and none waits for unfinished work.
static void progress(void) {
	for (int changed = 1; changed;) {
		changed = 0;
		for (int i = 0; i < ncliques; i++) {
			fclique *q = &cliques[i];
			if (q->stuck || q->joined < q->nranks) continue;
			int go = 1;
			for (int r = 0; r < q->nranks && go; r++) {
				fop *p = q->head[r];
				go = p != NULL && !p->stuck && !p->comm->dead && !pending_deps(&p->deps);
			}
			if (!go) continue;
			if (run_matched(q->head, q->nranks) != 0) {
				// NCCL would hang here: nothing on this communicator runs again.
				if (q->nranks == 1) record("mismatched calls on a one-rank communicator (would hang)");
				q->stuck = 1;
				for (int r = 0; r < q->nranks; r++) q->head[r]->stuck = 1;
				continue;
			}
			for (int r = 0; r < q->nranks; r++) {
				fop *p = q->head[r];
				p->done = 1;
				q->head[r] = p->next;
				if (q->head[r] == NULL) q->tail[r] = NULL;
			}
			changed = 1;
		}
	}
}

void post(call *calls, int n) {
	fcomm *c = calls[0].comm;
	fop *p = calloc(1, sizeof *p); // never freed: events and streams may point at it
	p->calls = malloc(sizeof(call) * (size_t)n);
	memcpy(p->calls, calls, sizeof(call) * (size_t)n);
	p->n = n;
	p->comm = c;
	p->stuck = hang;
	n_collectives += n;
	if (n > MAX_CLIQUE_CALLS) {
		record("the fake runs at most %d calls of one communicator in one group", MAX_CLIQUE_CALLS);
		p->stuck = 1;
	}
	for (int i = 0; i < n; i++) {
		fstream *s = calls[i].stream;
		pending_deps(&s->last);
		for (int k = 0; k < s->last.n; k++) {
			if (s->last.p[k] != p) add_dep(&p->deps, s->last.p[k]);
		}
	}
	for (int i = 0; i < n; i++) {
		fstream *s = calls[i].stream;
		s->last.n = 1;
		s->last.p[0] = p;
	}
	fclique *q = c->clique;
	if (q->tail[c->rank] != NULL) q->tail[c->rank]->next = p;
	else q->head[c->rank] = p;
	q->tail[c->rank] = p;
	progress();
}
