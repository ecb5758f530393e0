package shm

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/godist/godist/libgodist/algo"
)

// Mode says which rank creates the arena file.
type Mode int

const (
	// ModeAuto: whoever comes first creates the file (O_EXCL); the others
	// join it.
	ModeAuto Mode = iota
	// ModeCreate: this rank (the local leader) creates the file; Open fails
	// if it already exists.
	ModeCreate
	// ModeJoin: this rank waits for another rank to create the file.
	ModeJoin
)

// Defaults for the layout. They are package variables so that tests and
// benchmarks can move them; a Config field of 0 picks them up.
var (
	// DefaultDir is where arena files live.
	DefaultDir = "/dev/shm"
	// DefaultChunkSize is the size of each half of a rank's double-buffered
	// data slot: the unit in which large payloads move. It stays below the
	// 1 MiB at which Go's memmove switches to non-temporal stores, so a
	// chunk a rank has just written is still in cache when its peers read
	// it.
	DefaultChunkSize = 256 << 10
)

// DefaultRingSize is the capacity of each point-to-point ring (one per
// ordered pair of ranks) for a group of size local ranks: a power of two
// that holds a whole message below the single-copy threshold (cmaMin, plus
// its header) as long as all size*(size-1) rings fit in 16 MiB, so a
// sender rarely waits for its receiver to drain the ring (each such wait
// is a round trip through the scheduler when ranks outnumber cores); at
// least 4 KiB.
func DefaultRingSize(size int) int {
	pairs := max(size*(size-1), 1)
	r := 128 << 10
	for r > 4<<10 && r*pairs > 16<<20 {
		r /= 2
	}
	return r
}

// Config describes one rank's view of an arena. Rank and Size count local
// ranks only (the co-located members of the group, numbered 0..Size-1).
// ChunkSize, OneShotMax and RingSize are part of the layout: the creating
// rank's values (after defaults) are written into the arena and joining
// ranks adopt them; a joining rank that sets one to a different non-zero
// value gets ErrConfig.
type Config struct {
	// Name is the file's name under Dir: 1-200 characters from
	// [A-Za-z0-9._-], unique for this group instance (derive it from the
	// group's session, for example "godist-<session>-<group>").
	Name string
	// Dir is the directory of the file; "" means DefaultDir.
	Dir string
	// Rank and Size: this rank's local rank and the number of local ranks.
	Rank, Size int
	// Mode says who creates the file.
	Mode Mode
	// GlobalRanks, if set, maps local rank to group rank (len == Size). It
	// names peers in errors and is the source rank of point-to-point
	// messages delivered into a Mailbox. Default: the identity.
	GlobalRanks []int
	// ChunkSize is the size in bytes of each half of a rank's data slot
	// (a multiple of 64, at least MinChunkSize(Size)); 0 means
	// DefaultChunkSize.
	ChunkSize int
	// OneShotMax is the largest all-reduce in bytes done one-shot; 0 means
	// algo.ShmOneShotDefault(Size), a negative value disables one-shot. It
	// is capped at ChunkSize.
	OneShotMax int
	// RingSize is the capacity in bytes of each point-to-point ring (a
	// multiple of 64, at least 256); 0 means DefaultRingSize(Size).
	RingSize int
	// DirectMin is the smallest block in bytes that AllToAll moves by
	// single copy when the ranks can read each other's memory (direct.go);
	// 0 means algo.Default()'s ShmDirectMin, a negative value disables
	// single copy.
	DirectMin int
	// Table is the sizes the arena chooses its algorithms by beyond the
	// layout's (libgodist/algo; nil: algo.Default()). Every rank of the
	// arena must pass the same values.
	Table *algo.Table
	// markFailure: a creation that fails leaves the file at failedSize
	// instead of removing it, so that ranks already waiting to join fail
	// at once (early.go).
	markFailure bool
	// Wait overrides the wait policy; nil means DefaultWaitPolicy(Size).
	// It is local to this rank.
	Wait *WaitPolicy
}

// MinChunkSize is the smallest ChunkSize for size local ranks: every rank's
// share of a chunk must hold a 16-byte element.
func MinChunkSize(size int) int { return max(256, alignUp(32*size, 64)) }

// maxSize bounds the number of local ranks (and so the arena's size).
const maxSize = 1024

// normalize checks c and fills in defaults (except the layout fields of a
// joining rank, which come from the arena).
func (c *Config) normalize() error {
	if c.Name == "" || len(c.Name) > 200 || c.Name == "." || c.Name == ".." ||
		strings.IndexFunc(c.Name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
		}) >= 0 {
		return invalidf("arena name %q must be 1-200 characters from [A-Za-z0-9._-]", c.Name)
	}
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.Size < 1 || c.Size > maxSize {
		return invalidf("size %d must be between 1 and %d", c.Size, maxSize)
	}
	if c.Rank < 0 || c.Rank >= c.Size {
		return invalidf("rank %d is out of range for %d local ranks", c.Rank, c.Size)
	}
	if c.Mode < ModeAuto || c.Mode > ModeJoin {
		return invalidf("unknown mode %d", c.Mode)
	}
	if c.GlobalRanks != nil {
		if len(c.GlobalRanks) != c.Size {
			return invalidf("GlobalRanks has %d entries for %d local ranks", len(c.GlobalRanks), c.Size)
		}
		c.GlobalRanks = append([]int(nil), c.GlobalRanks...)
	}
	if c.ChunkSize != 0 && (c.ChunkSize%64 != 0 || c.ChunkSize < MinChunkSize(c.Size) || c.ChunkSize > 1<<30) {
		return invalidf("chunk size %d must be a multiple of 64 between %d and 1 GiB", c.ChunkSize, MinChunkSize(c.Size))
	}
	if c.RingSize != 0 && (c.RingSize%64 != 0 || c.RingSize < 256 || c.RingSize > 1<<30) {
		return invalidf("ring size %d must be a multiple of 64 between 256 and 1 GiB", c.RingSize)
	}
	if c.Wait != nil {
		if err := c.Wait.check(); err != nil {
			return err
		}
	}
	return nil
}

// params are the layout parameters stored in the arena header.
type params struct {
	size, chunk, oneShot, ring, direct int
}

// params returns the layout a creating rank writes (defaults applied).
func (c *Config) params() params {
	p := params{size: c.Size, chunk: c.ChunkSize, oneShot: c.OneShotMax, ring: c.RingSize, direct: c.DirectMin}
	if p.chunk == 0 {
		p.chunk = max(DefaultChunkSize, MinChunkSize(c.Size))
	}
	switch {
	case p.oneShot == 0:
		p.oneShot = algo.ShmOneShotDefault(c.Size)
	case p.oneShot < 0:
		p.oneShot = -1
	}
	p.oneShot = min(p.oneShot, p.chunk)
	if p.ring == 0 {
		p.ring = DefaultRingSize(c.Size)
	}
	switch {
	case p.direct == 0:
		def := algo.Default()
		p.direct = def.ShmDirect()
	case p.direct < 0:
		p.direct = -1
	}
	return p
}

// adopt checks a joining rank's explicit settings against the arena's.
func (c *Config) adopt(p params) error {
	if p.size != c.Size {
		return fmt.Errorf("%w: the arena is for %d local ranks, this rank expects %d", ErrConfig, p.size, c.Size)
	}
	if c.ChunkSize != 0 && c.ChunkSize != p.chunk {
		return fmt.Errorf("%w: the arena's chunk size is %d, this rank asked for %d", ErrConfig, p.chunk, c.ChunkSize)
	}
	if c.OneShotMax != 0 && min(max(c.OneShotMax, -1), p.chunk) != p.oneShot {
		return fmt.Errorf("%w: the arena's one-shot limit is %d, this rank asked for %d", ErrConfig, p.oneShot, c.OneShotMax)
	}
	if c.DirectMin != 0 && max(c.DirectMin, -1) != p.direct {
		return fmt.Errorf("%w: the arena's single-copy threshold is %d, this rank asked for %d", ErrConfig, p.direct, c.DirectMin)
	}
	if c.RingSize != 0 && c.RingSize != p.ring {
		return fmt.Errorf("%w: the arena's ring size is %d, this rank asked for %d", ErrConfig, p.ring, c.RingSize)
	}
	return nil
}

// WaitPolicy says how a rank waits for its peers (see wait.go and the
// package documentation).
type WaitPolicy struct {
	// Spin is how long to busy-poll (with a CPU pause hint) before yielding.
	// Only worth it when every local rank has a core of its own.
	Spin time.Duration
	// Yield is how long to poll with sched_yield after spinning, before
	// sleeping on a futex.
	Yield time.Duration
	// Sleep is the longest single futex sleep: how often a sleeping waiter
	// re-checks its deadline, its context and the peer it waits for.
	Sleep time.Duration
	// Liveness is how often a waiter checks that the process of the peer it
	// waits for still exists.
	Liveness time.Duration
	// Idle is the longest futex sleep of the point-to-point receiver when
	// no message is in flight.
	//
	// Sleep and Idle stay below maxSyscallSleep: a goroutine asleep in a
	// system call keeps its P, and the Go runtime's monitor takes back a P
	// held 10 ms in one call, then polls every 20 µs for the next
	// millisecond and more.
	Idle time.Duration
	// Spread moves a waiting rank off a CPU that holds more local ranks
	// than its share (spread.go).
	Spread bool
}

// DefaultWaitPolicy is the policy for size local ranks: spin briefly only
// when size <= runtime.NumCPU(), then yield-poll, then sleep; keep the
// ranks spread evenly over the CPUs.
func DefaultWaitPolicy(size int) WaitPolicy {
	p := WaitPolicy{Yield: 200 * time.Microsecond, Sleep: 5 * time.Millisecond,
		Liveness: 5 * time.Millisecond, Idle: maxSyscallSleep, Spread: size > 1}
	if size <= runtime.NumCPU() {
		p.Spin = 5 * time.Microsecond
	}
	return p
}

// maxSyscallSleep bounds the sleeps of the default wait policy (see
// WaitPolicy.Idle): under the runtime monitor's 10 ms, with room for the
// loop around them.
const maxSyscallSleep = 8 * time.Millisecond

func (p *WaitPolicy) check() error {
	if p.Spin < 0 || p.Yield < 0 || p.Sleep <= 0 || p.Liveness <= 0 || p.Idle <= 0 {
		return invalidf("wait policy %+v: Spin and Yield must be >= 0, Sleep, Liveness and Idle > 0", *p)
	}
	return nil
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }
