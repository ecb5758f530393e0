package mpi

/*
#include "loader.h"
*/
import "C"

import (
	"math"
	"unsafe"

	"github.com/godist/godist/libgodist/reduce"
)

// ptr is b's first byte, or nil for an empty b.
func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func i64ptr(v []int64) *C.int64_t {
	if len(v) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&v[0]))
}

func (l *Lib) comm(call string, c Comm) (commInfo, error) {
	l.commMu.Lock()
	ci, ok := l.comms[c]
	l.commMu.Unlock()
	if !ok {
		return ci, argError(call, "unknown communicator %d", c)
	}
	return ci, nil
}

// CommCreate makes a communicator of the world ranks worldRanks (in that
// order: rank i of the new communicator is worldRanks[i]). It is
// collective over those ranks only (MPI_Comm_create_group), which must all
// pass the same ranks and tag; the calling rank must be one of them.
func (l *Lib) CommCreate(worldRanks []int, tag int) (Comm, error) {
	const call = "MPI_Comm_create_group"
	me := -1
	ranks := make([]C.int, len(worldRanks))
	for i, r := range worldRanks {
		if r < 0 || r >= l.WorldSize {
			return 0, argError(call, "world rank %d out of range [0, %d)", r, l.WorldSize)
		}
		if r == l.WorldRank {
			me = i
		}
		ranks[i] = C.int(r)
	}
	if me < 0 {
		return 0, argError(call, "world rank %d is not among %v", l.WorldRank, worldRanks)
	}
	defer l.lock()()
	var id C.int
	if rc := C.gml_comm_create(&ranks[0], C.int(len(ranks)), C.int(tag), &id); rc != 0 {
		return 0, mpiError(call, rc)
	}
	l.commMu.Lock()
	l.comms[Comm(id)] = commInfo{rank: me, size: len(worldRanks)}
	l.commMu.Unlock()
	return Comm(id), nil
}

// Bcast broadcasts buf from root, blocking (for rendezvous); buf may be Go
// memory.
func (l *Lib) Bcast(c Comm, buf []byte, root int) error {
	const call = "MPI_Bcast"
	if _, err := l.checkRoot(call, c, root); err != nil {
		return err
	}
	defer l.lock()()
	return mpiError(call, C.gml_bcast(C.int(c), ptr(buf), C.int64_t(len(buf)), C.int(root)))
}

func (l *Lib) checkRoot(call string, c Comm, root int) (commInfo, error) {
	ci, err := l.comm(call, c)
	if err != nil {
		return ci, err
	}
	if root < 0 || root >= ci.size {
		return ci, argError(call, "root %d out of range [0, %d)", root, ci.size)
	}
	return ci, nil
}

// checkReduction checks dt and that buf holds count elements.
func checkReduction(call string, buf []byte, count int64, dt reduce.DType) error {
	if !dt.Valid() {
		return argError(call, "unknown dtype %d", dt)
	}
	if count < 0 || count > math.MaxInt32 {
		return argError(call, "count %d out of range [0, %d]", count, math.MaxInt32)
	}
	if int64(len(buf)) < count*int64(dt.Size()) {
		return argError(call, "buffer of %d bytes holds fewer than %d %s elements", len(buf), count, dt)
	}
	// The shim refuses the pairs MPI cannot reduce (GM_ERR_ARG): bitwise
	// ops on float and complex, MIN and MAX on complex, AVG, PREMUL_SUM.
	return nil
}

func request(call string, rc C.int, req C.int64_t) (Request, error) {
	if rc != 0 {
		return 0, mpiError(call, rc)
	}
	return Request(req), nil
}

// Iallreduce reduces count elements of dt in buf in place over c.
// AVG and PREMUL_SUM are SUM plus scaling, done by the caller.
func (l *Lib) Iallreduce(c Comm, buf []byte, count int64, dt reduce.DType, op reduce.Op) (Request, error) {
	const call = "MPI_Iallreduce"
	if _, err := l.comm(call, c); err != nil {
		return 0, err
	}
	if err := checkReduction(call, buf, count, dt); err != nil {
		return 0, err
	}
	defer l.lock()()
	var req C.int64_t
	rc := C.gml_iallreduce(C.int(c), ptr(buf), C.int64_t(count), C.int(dt), C.int(op), &req)
	return request(call, rc, req)
}

// Ireduce reduces count elements of dt into root's buf (in place there);
// the other ranks' buf is only read.
func (l *Lib) Ireduce(c Comm, buf []byte, count int64, dt reduce.DType, op reduce.Op, root int) (Request, error) {
	const call = "MPI_Ireduce"
	if _, err := l.checkRoot(call, c, root); err != nil {
		return 0, err
	}
	if err := checkReduction(call, buf, count, dt); err != nil {
		return 0, err
	}
	defer l.lock()()
	var req C.int64_t
	rc := C.gml_ireduce(C.int(c), ptr(buf), C.int64_t(count), C.int(dt), C.int(op), C.int(root), &req)
	return request(call, rc, req)
}

// IreduceScatterBlock reduces in (size*count elements) and leaves block r
// of the result, count elements, in rank r's out.
func (l *Lib) IreduceScatterBlock(c Comm, in, out []byte, count int64, dt reduce.DType, op reduce.Op) (Request, error) {
	const call = "MPI_Ireduce_scatter_block"
	ci, err := l.comm(call, c)
	if err != nil {
		return 0, err
	}
	if err := checkReduction(call, out, count, dt); err != nil {
		return 0, err
	}
	if int64(len(in)) < count*int64(dt.Size())*int64(ci.size) {
		return 0, argError(call, "input of %d bytes holds fewer than %d x %d elements", len(in), ci.size, count)
	}
	defer l.lock()()
	var req C.int64_t
	rc := C.gml_ireduce_scatter_block(C.int(c), ptr(in), ptr(out), C.int64_t(count), C.int(dt), C.int(op), &req)
	return request(call, rc, req)
}

// Ibcast broadcasts buf from root.
func (l *Lib) Ibcast(c Comm, buf []byte, root int) (Request, error) {
	const call = "MPI_Ibcast"
	if _, err := l.checkRoot(call, c, root); err != nil {
		return 0, err
	}
	if len(buf) > math.MaxInt32 {
		return 0, argError(call, "%d bytes is more than %d", len(buf), math.MaxInt32)
	}
	defer l.lock()()
	var req C.int64_t
	return request(call, C.gml_ibcast(C.int(c), ptr(buf), C.int64_t(len(buf)), C.int(root), &req), req)
}

// Iallgather gathers every rank's in into out (size*len(in) bytes, rank
// r's at r*len(in)). in may be out's own block (in place).
func (l *Lib) Iallgather(c Comm, in, out []byte) (Request, error) {
	const call = "MPI_Iallgather"
	ci, err := l.comm(call, c)
	if err != nil {
		return 0, err
	}
	if len(in) > math.MaxInt32 {
		return 0, argError(call, "%d bytes is more than %d", len(in), math.MaxInt32)
	}
	if int64(len(out)) < int64(len(in))*int64(ci.size) {
		return 0, argError(call, "output of %d bytes is smaller than %d x %d", len(out), ci.size, len(in))
	}
	defer l.lock()()
	var req C.int64_t
	return request(call, C.gml_iallgather(C.int(c), ptr(in), ptr(out), C.int64_t(len(in)), &req), req)
}

// checkBlocks checks that counts and displs (bytes, one per rank) fit in a
// buffer of n bytes.
func checkBlocks(call, what string, size int, counts, displs []int64, n int) error {
	if len(counts) != size || len(displs) != size {
		return argError(call, "%s counts and displacements need %d entries, have %d and %d", what, size,
			len(counts), len(displs))
	}
	for i := range counts {
		if counts[i] < 0 || displs[i] < 0 || counts[i] > math.MaxInt32 || displs[i] > math.MaxInt32 ||
			counts[i]+displs[i] > int64(n) {
			return argError(call, "%s block %d (%d bytes at %d) is outside the %d-byte buffer or beyond %d", what,
				i, counts[i], displs[i], n, math.MaxInt32)
		}
	}
	return nil
}

// Ialltoallv sends in's block r (scounts[r] bytes at sdispls[r]) to rank
// r and receives rank r's block into out (rcounts[r] bytes at rdispls[r]).
func (l *Lib) Ialltoallv(c Comm, in []byte, scounts, sdispls []int64, out []byte, rcounts, rdispls []int64) (Request, error) {
	const call = "MPI_Ialltoallv"
	ci, err := l.comm(call, c)
	if err != nil {
		return 0, err
	}
	if err := checkBlocks(call, "send", ci.size, scounts, sdispls, len(in)); err != nil {
		return 0, err
	}
	if err := checkBlocks(call, "receive", ci.size, rcounts, rdispls, len(out)); err != nil {
		return 0, err
	}
	defer l.lock()()
	var req C.int64_t
	rc := C.gml_ialltoallv(C.int(c), ptr(in), i64ptr(scounts), i64ptr(sdispls), ptr(out), i64ptr(rcounts),
		i64ptr(rdispls), &req)
	return request(call, rc, req)
}

// Igatherv gathers every rank's in into root's out (rank r's rcounts[r]
// bytes at rdispls[r]); out, rcounts and rdispls are read at root only.
func (l *Lib) Igatherv(c Comm, in, out []byte, rcounts, rdispls []int64, root int) (Request, error) {
	const call = "MPI_Igatherv"
	ci, err := l.checkRoot(call, c, root)
	if err != nil {
		return 0, err
	}
	if len(in) > math.MaxInt32 {
		return 0, argError(call, "%d bytes is more than %d", len(in), math.MaxInt32)
	}
	if ci.rank == root {
		if err := checkBlocks(call, "receive", ci.size, rcounts, rdispls, len(out)); err != nil {
			return 0, err
		}
	} else {
		out, rcounts, rdispls = nil, nil, nil
	}
	defer l.lock()()
	var req C.int64_t
	rc := C.gml_igatherv(C.int(c), ptr(in), C.int64_t(len(in)), ptr(out), i64ptr(rcounts), i64ptr(rdispls),
		C.int(root), &req)
	return request(call, rc, req)
}

// Iscatterv sends root's in block r (scounts[r] bytes at sdispls[r]) to
// rank r's out; in, scounts and sdispls are read at root only.
func (l *Lib) Iscatterv(c Comm, in []byte, scounts, sdispls []int64, out []byte, root int) (Request, error) {
	const call = "MPI_Iscatterv"
	ci, err := l.checkRoot(call, c, root)
	if err != nil {
		return 0, err
	}
	if len(out) > math.MaxInt32 {
		return 0, argError(call, "%d bytes is more than %d", len(out), math.MaxInt32)
	}
	if ci.rank == root {
		if err := checkBlocks(call, "send", ci.size, scounts, sdispls, len(in)); err != nil {
			return 0, err
		}
	} else {
		in, scounts, sdispls = nil, nil, nil
	}
	defer l.lock()()
	var req C.int64_t
	rc := C.gml_iscatterv(C.int(c), ptr(in), i64ptr(scounts), i64ptr(sdispls), ptr(out), C.int64_t(len(out)),
		C.int(root), &req)
	return request(call, rc, req)
}

// Ibarrier starts a barrier over c.
func (l *Lib) Ibarrier(c Comm) (Request, error) {
	const call = "MPI_Ibarrier"
	if _, err := l.comm(call, c); err != nil {
		return 0, err
	}
	defer l.lock()()
	var req C.int64_t
	return request(call, C.gml_ibarrier(C.int(c), &req), req)
}

func (l *Lib) checkPeer(call string, c Comm, peer, tag int, anySource bool) error {
	ci, err := l.comm(call, c)
	if err != nil {
		return err
	}
	if (peer < 0 || peer >= ci.size) && !(anySource && peer == -1) {
		return argError(call, "peer %d out of range [0, %d)", peer, ci.size)
	}
	if tag < 0 || tag > l.TagUB {
		return argError(call, "tag %d out of range [0, %d]", tag, l.TagUB)
	}
	return nil
}

// Isend sends buf to peer with tag.
func (l *Lib) Isend(c Comm, buf []byte, peer, tag int) (Request, error) {
	const call = "MPI_Isend"
	if err := l.checkPeer(call, c, peer, tag, false); err != nil {
		return 0, err
	}
	if len(buf) > math.MaxInt32 {
		return 0, argError(call, "%d bytes is more than %d", len(buf), math.MaxInt32)
	}
	defer l.lock()()
	var req C.int64_t
	return request(call, C.gml_isend(C.int(c), ptr(buf), C.int64_t(len(buf)), C.int(peer), C.int(tag), &req), req)
}

// Irecv receives at most len(buf) bytes from peer (-1: any source) with
// tag; Test reports the source and the size.
func (l *Lib) Irecv(c Comm, buf []byte, peer, tag int) (Request, error) {
	const call = "MPI_Irecv"
	if err := l.checkPeer(call, c, peer, tag, true); err != nil {
		return 0, err
	}
	if len(buf) > math.MaxInt32 {
		return 0, argError(call, "%d bytes is more than %d", len(buf), math.MaxInt32)
	}
	defer l.lock()()
	var req C.int64_t
	return request(call, C.gml_irecv(C.int(c), ptr(buf), C.int64_t(len(buf)), C.int(peer), C.int(tag), &req), req)
}

// Test reports whether r is done; a done request is freed (its id is
// invalid afterwards). For a receive, source is the sender's rank in the
// communicator and nbytes the bytes received; -1 and 0 otherwise. A
// request that failed is done and returns its error.
func (l *Lib) Test(r Request) (done bool, source int, nbytes int64, err error) {
	defer l.lock()()
	var d, src C.int
	var nb C.int64_t
	rc := C.gml_test(C.int64_t(r), &d, &src, &nb)
	if d == 0 {
		return false, -1, 0, mpiError("MPI_Test", rc)
	}
	return true, int(src), int64(nb), mpiError("MPI_Test", rc)
}

// Abandon gives up on r: a send is freed, a receive cancelled, and a
// collective (which MPI cannot cancel) is left to finish, tested by later
// calls. Its buffers must stay valid until MPI is done with them.
func (l *Lib) Abandon(r Request) error {
	defer l.lock()()
	return mpiError("MPI_Request_free", C.gml_abandon(C.int64_t(r)))
}
