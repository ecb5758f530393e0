// Package shm is godist's same-host path: a shared-memory arena per group,
// mapped by every co-located rank, with collectives and point-to-point
// messages that move data through it instead of through sockets.
//
// # Using it
//
// Every local rank calls Open with the same Config.Name (derived from the
// group's session, unique per group instance), its local Rank and the
// number of local ranks Size. One rank creates the file (ModeCreate for the
// local leader, or ModeAuto: whoever comes first, with O_EXCL); Open
// returns when all Size ranks have mapped it, and by then the file is
// unlinked, so nothing is left in /dev/shm however the processes end.
// A group gets an arena through the Offloader (offload.go), the
// backend.Offloader the composition root hands the engine: it publishes a
// probe file's name at rendezvous, agrees with every rank that all of them
// share this host and its /dev/shm, and opens the arena.
//
// Collectives (AllReduce, Broadcast, AllGather, ReduceScatter, AllToAll,
// Barrier) take a context whose deadline bounds every wait, run one at a
// time, and must be issued in the same order on every local rank (c10d
// semantics). Buffers belong to the caller and are not kept. Reductions
// take a CombineFunc (dst = a op b, e.g. reduce.Combine3) and always combine
// contributions in rank order, so results are bitwise identical on every
// rank and from run to run. Send delivers point-to-point messages into
// the transport.Mailbox a rank attaches with Attach (one mailbox can serve
// TCP peers too; GlobalRanks maps local ranks to the group's); the
// router (router.go) sends to co-located peers through the arena and to
// the others through the fabric's transport.
//
// Errors: *transport.PeerError{Op, Peer (group rank), Err} wrapping
// transport.ErrTimeout (deadline), ErrPeerGone (the peer closed),
// ErrConnLost (the peer's process died or it aborted), ErrSizeMismatch
// (every rank reports it; the arena stays usable) or ErrDesync (ranks run
// different operations; with a *transport.DesyncError naming both calls
// when the collectives' contexts carry the engine's fingerprints,
// desync.go); transport.ErrClosed after Close; ErrInvalid for bad
// arguments; ErrBroken for collectives after a fatal error.
//
// # Arena layout
//
// One file, all offsets in bytes, P local ranks, C = ChunkSize, R =
// RingSize. Every word more than one rank reads has a single writer (its
// owner) unless marked, and every owner's words sit on cache lines of
// their own (64 bytes).
//
//	header, page 0
//	  0   u64 magic (stored last by the creator: ready)   8 u32 version
//	  12  u32 P   16 u64 C   24 i64 one-shot limit   32 u64 R   40 u64 file size
//	  48  i64 single-copy threshold
//	  64  u32 joined (multi-writer: ranks that mapped the file)
//	  128 u32 probed (multi-writer: ranks that published their direct verdict)
//	control, 1152 bytes per rank at 4096 + 1152*r
//	  0    u32 state (free, joining, active, closed, failed)   4 i32 cause rank
//	  8    i64 pid   16 u64 pid namespace   24 u32 cause kind
//	  32   u64 address of this rank's probe word   40 u32 direct verdict
//	  64   u64 D: last step this rank has consumed
//	  128  u64 R: last step whose reduced share this rank has published
//	  192  u32 x4 sleeper counts for block 0, block 1, D, R (written by waiters)
//	  256  step block, parity 0 (320 bytes):
//	         u64 seq (= A, the step published), u32 op kind, u32 arg, u64 n,
//	         the collective's fingerprint (u32 op|dtype|reduce op, i32 root,
//	         u32 detail, pad, u64 count, u64 seq), u64 hash of the one before,
//	         then at +64 InlineSize (256) bytes of inline payload
//	  576  step block, parity 1
//	  896  u32 doorbell (multi-writer: senders), u32 receiver sleeping
//	  1024 u64 version (odd while written), the fingerprints of the
//	       collective this rank runs and of the one before (48 bytes each)
//	data, page aligned: per rank two slot halves of C bytes, rank r's half
//	  b at dataBase + (2r+b)*C
//	channels, page aligned: per ordered pair (src, dst) at
//	  chanBase + (src*P+dst)*(192+R): u64 head (src) | u64 tail (dst) |
//	  u32 broken, u32 sender sleeping, u32 refused (dst), then the shared
//	  copy's job (multi-writer): u64 claim word, u64 destination address,
//	  u64 offset, u64 length, u32 pieces done by src, u32 piece to redo |
//	  R bytes of ring
//
// The file is sized with fallocate when created, so a full /dev/shm fails
// Open instead of raising SIGBUS later.
//
// # Steps
//
// Every rank keeps the same step counter: each collective uses a number of
// steps that depends only on arguments all ranks share, so step s means the
// same thing everywhere. Step s uses the step block and slot half of
// parity s%2. A rank publishes step s by writing its payload (inline, or in
// its slot half), its operation descriptor, and then swapping seq to s
// (compare-and-swap, so that a peer that gave up on the step can poison
// the word first: agree.go); readers load seq with acquire semantics. Before
// writing the block or slot half of step s, a rank waits until every peer's
// D >= s-2 (they have consumed the previous use), so a fast rank runs at
// most one step ahead and no second barrier is needed. Descriptors let
// every rank detect a peer running another operation (ErrDesync) or
// another size (ErrSizeMismatch, detected by every rank at the same first
// step, after which all skip the same steps).
//
// # Protocols
//
// AllReduce, one-shot (n <= OneShotMax): copy in, publish, wait for every
// peer's step, reduce all P areas in rank order into the caller's buffer,
// publish D. One synchronization; n bytes written and P*n read per rank.
//
// AllReduce, two-shot: per chunk of C bytes, copy in and publish A; after
// every A, rank r reduces share r (1/P of the chunk, whole elements) of
// all slots in rank order and writes it back into its slot, publishes R;
// copies the next chunk into its other slot half (overlapping the slower
// ranks' reductions); after every R, copies each owner's share out and
// publishes D. Each share's bytes are computed once, by its owner.
//
// Broadcast: the root publishes chunk after chunk (inline up to 256
// bytes), the others copy each out and publish D; the root reuses a slot
// half once every D has passed it.
//
// AllGather: per chunk, everyone copies in and publishes; after every
// peer's step, copies the next chunk in, then every peer's chunk out.
//
// ReduceScatter: per piece of C/P bytes of each block, every rank copies
// its blocks for the others into P regions of its slot; after every peer's
// step each rank reduces its own region of all slots (and its own block)
// in rank order into its output.
//
// AllToAll: step 0 carries each rank's table of block sizes (sent and
// expected) and the first
// C/P bytes of every block; the largest block decides the number of
// rounds; every round moves the next C/P bytes of every block.
//
// AllToAll, single copy (direct.go): when every rank could read every
// other's memory at Open (process_vm_readv of a probe word) and the
// largest block reaches DirectMin, step 0's tables also carry the blocks'
// addresses; each rank reads its blocks straight out of the senders'
// memory, publishes D, and waits for every peer's D before returning (two
// synchronizations instead of one per round).
//
// Broadcast, two ranks, shared single copy (broadcast_shared.go): from
// 1 MiB, when the ranks can read each other's memory, step 0 carries both
// buffers' addresses and a piece counter in the receiver's slot; both
// ranks claim 256 KiB pieces, the receiver reading its pieces out of the
// root's buffer, the root writing its pieces into the receiver's. The op
// uses the slot protocol's step numbers, so a size mismatch skips alike.
//
// Barrier: publish an empty step, wait for every peer's.
//
// Send: a byte ring per ordered pair; messages are a 16-byte header (tag,
// length; a collective's message has bit 62 of the length set and its
// 48-byte fingerprint after the header) and the payload, streamed in pieces of up to R/4; the receiver
// goroutine started by Attach delivers them into the mailbox in order.
// From 64 KiB the ring carries only a descriptor and the receiver reads
// the payload out of the sender's memory (p2p_direct.go); from 512 KiB,
// where every local rank has a CPU, the waiting sender claims pieces of
// the receiver's read and writes them into the receiver's memory
// (p2p_share.go, job fields in the channel's header).
//
// # Waiting
//
// wait.go. A waiter spins with a pause hint for WaitPolicy.Spin (only
// when P <= runtime.NumCPU(), so ranks never burn a core another rank
// needs), then polls with sched_yield for WaitPolicy.Yield (adding
// runtime.Gosched only when several ranks are goroutines of one process
// with fewer Ps than ranks, as in tests), then sleeps with FUTEX_WAIT on
// the awaited word's low 32 bits after registering in the owner's sleeper
// count; the owner calls FUTEX_WAKE after publishing only when that count
// is non-zero. Between polls, and at least every WaitPolicy.Sleep while
// sleeping, the waiter checks its deadline and context, this rank
// closing, the awaited peer's state word, and every WaitPolicy.Liveness
// whether the peer's process still exists (a pidfd, which also sees
// zombies, else kill(pid, 0); only for peers in this pid namespace). A
// rank that fails because a peer is gone marks itself failed with that
// peer as the cause, so the ranks waiting for it fail at once and name
// the same peer. A rank that gives up on a word of its running collective
// poisons it first (agree.go), so that no rank completes the collective
// it abandoned.
package shm
