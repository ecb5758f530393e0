package libgodist

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/godist/godist/store"
)

// Keys of the store rendezvous, relative to the group's store (torch hands
// each backend a store already prefixed with the group's name). The Python
// path in python/godist/_rendezvous.py uses the same keys, so ranks taking
// either path meet.
const (
	rdvGenerationKey = "godist/generation"
	rdvRecordPrefix  = "godist/"
)

// RendezvousKeys returns the keys of the store rendezvous: the generation
// counter's, and the template of a record's, where {gen} and {rank} stand
// for the decimal generation and rank. python/godist/_rendezvous.py writes
// the same keys; python/tests/test_facts.py reads these (godist_facts) and
// checks the keys it writes.
func RendezvousKeys() (generation, record string) {
	return rdvGenerationKey, rdvRecordPrefix + "{gen}/{rank}"
}

// rdvRecordKey is the key of rank's record in generation gen.
func rdvRecordKey(gen int64, rank int) string {
	return rdvRecordPrefix + strconv.FormatInt(gen, 10) + "/" + strconv.Itoa(rank)
}

// RendezvousError reports a store rendezvous that did not complete in time:
// the ranks whose records never appeared.
type RendezvousError struct {
	Group      string
	Rank, Size int
	After      time.Duration
	Missing    []int // ranks that never published their record
	Err        error // the store's error
}

func (e *RendezvousError) Error() string {
	return fmt.Sprintf("godist: rendezvous of group %q (rank %d of %d) timed out after %v: rank(s) %v did not join "+
		"(they never published their address; did every rank call init_process_group/new_group with the same "+
		"arguments?): %v", e.Group, e.Rank, e.Size, e.After, e.Missing, e.Err)
}

func (e *RendezvousError) Unwrap() error { return e.Err }

// Timeout reports true: the rendezvous ran out of time.
func (e *RendezvousError) Timeout() bool { return true }

// RendezvousStore runs the whole rendezvous of pg through s and connects
// the group, within timeout (and ctx; Close or Abort of pg also ends it):
//
//  1. gen = (Add("godist/generation", 1) - 1) / size, so a store reused
//     across init/destroy cycles never serves stale records;
//  2. Set("godist/<gen>/<rank>", LocalRecord());
//  3. wait for every rank's key and read them all;
//  4. Connect(records, timeout).
//
// This is the protocol of python/godist/_rendezvous.py, without a round
// trip through Python per key. A group of size 1 needs nothing.
func (pg *ProcessGroup) RendezvousStore(ctx context.Context, s store.Store, timeout time.Duration) error {
	n, rank, group := pg.cfg.Size, pg.cfg.Rank, pg.cfg.Group
	if n == 1 {
		return nil
	}
	if s == nil || timeout <= 0 {
		return invalidf("rendezvous of group %q needs a store and a positive timeout", group)
	}
	rec, err := pg.LocalRecord()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(pg.ctx, cancel)
	defer stop()
	fail := func(step string, err error) error {
		if pg.ctx.Err() != nil {
			return fmt.Errorf("godist: rendezvous of group %q: %w", group, ErrClosed)
		}
		return fmt.Errorf("godist: rendezvous of group %q (rank %d of %d): %s: %w", group, rank, n, step, err)
	}

	g, err := s.Add(ctx, rdvGenerationKey, 1)
	if err != nil {
		return fail("generation counter", err)
	}
	gen := (g - 1) / int64(n)
	keys := make([]string, n)
	for r := range keys {
		keys[r] = rdvRecordKey(gen, r)
	}
	if err := s.Set(ctx, keys[rank], rec); err != nil {
		return fail("publishing this rank's record", err)
	}
	if err := s.Wait(ctx, keys); err != nil {
		if errors.Is(err, store.ErrTimeout) && pg.ctx.Err() == nil {
			return &RendezvousError{Group: group, Rank: rank, Size: n, After: timeout, Missing: missingRanks(s, keys), Err: err}
		}
		return fail("waiting for the other ranks", err)
	}
	records, err := s.MultiGet(ctx, keys)
	if err != nil {
		return fail("reading the records", err)
	}
	return pg.Connect(records, timeout)
}

// missingRanks lists the ranks whose key is absent, as far as a short check
// can tell (a failing store yields an empty list).
func missingRanks(s store.Store, keys []string) []int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	missing := []int{}
	for r, k := range keys {
		ok, err := s.Check(ctx, []string{k})
		if err != nil {
			return []int{}
		}
		if !ok {
			missing = append(missing, r)
		}
	}
	return missing
}
