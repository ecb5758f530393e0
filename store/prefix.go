package store

import (
	"context"
	"strings"
	"sync"
	"time"
)

// PrefixStore is a view of another Store in which every key k becomes
// prefix+"/"+k, as in torch's PrefixStore (the "/" is added even when the
// prefix already ends in "/", so torch's default process group keys look
// like "default_pg/0//cpu//k").
//
// NumKeys is not filtered (it is the inner store's count). ListKeys keeps
// inner keys that start with prefix and strips len(prefix)+1 bytes from them
// (torch's check omits the "/", so prefix "a" also lists "ab/x" as "/x"; a key
// equal to the prefix is skipped where torch would throw). Timeout and
// SetTimeout act on the inner store.
//
// Close closes only this view, not the inner store, which its creator owns;
// a Clone owns its cloned inner store and closes it.
type PrefixStore struct {
	prefix    string
	inner     Store
	ownsInner bool
	closed    chan struct{}
	closedCtx context.Context // cancelled by Close
	cancel    context.CancelFunc
	once      sync.Once
}

var _ Store = (*PrefixStore)(nil)

// NewPrefixStore returns a PrefixStore over inner. A nil inner gives
// ErrInvalid (torch raises ValueError).
func NewPrefixStore(prefix string, inner Store) (*PrefixStore, error) {
	if inner == nil {
		return nil, &OpError{Store: "prefix", Op: "new", Err: errf(ErrInvalid, "PrefixStore %q needs an underlying store", prefix)}
	}
	return newPrefix(prefix, inner, false), nil
}

func newPrefix(prefix string, inner Store, owns bool) *PrefixStore {
	ctx, cancel := context.WithCancel(context.Background())
	return &PrefixStore{prefix: prefix, inner: inner, ownsInner: owns, closed: make(chan struct{}), closedCtx: ctx, cancel: cancel}
}

// Prefix returns the prefix (without the joining "/").
func (p *PrefixStore) Prefix() string { return p.prefix }

// Underlying returns the store this one wraps.
func (p *PrefixStore) Underlying() Store { return p.inner }

// UnderlyingNonPrefix returns the first store below p that is not a
// PrefixStore.
func (p *PrefixStore) UnderlyingNonPrefix() Store {
	s := p.inner
	for {
		ps, ok := s.(*PrefixStore)
		if !ok {
			return s
		}
		s = ps.inner
	}
}

// join returns prefix + "/" + key.
func (p *PrefixStore) join(key string) string { return p.prefix + "/" + key }

func (p *PrefixStore) joinAll(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = p.join(k)
	}
	return out
}

// open returns ErrClosed once Close was called.
func (p *PrefixStore) open(op string) error {
	select {
	case <-p.closed:
		return &OpError{Store: "prefix", Op: op, Addr: p.prefix, Err: ErrClosed}
	default:
		return nil
	}
}

// blocking runs a blocking inner operation with a ctx that Close cancels,
// and reports ErrClosed if Close interrupted it.
func (p *PrefixStore) blocking(ctx context.Context, op string, f func(ctx context.Context) error) error {
	if err := p.open(op); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.closedCtx, cancel)
	defer stop()
	err := f(ctx)
	if err != nil && p.closedCtx.Err() != nil {
		return &OpError{Store: "prefix", Op: op, Addr: p.prefix, Err: ErrClosed}
	}
	return err
}

// Set sets prefix/key.
func (p *PrefixStore) Set(ctx context.Context, key string, value []byte) error {
	if err := p.open("set"); err != nil {
		return err
	}
	return p.inner.Set(ctx, p.join(key), value)
}

// Get gets prefix/key.
func (p *PrefixStore) Get(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := p.blocking(ctx, "get", func(ctx context.Context) (err error) {
		v, err = p.inner.Get(ctx, p.join(key))
		return err
	})
	return v, err
}

// Add adds to prefix/key.
func (p *PrefixStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := p.open("add"); err != nil {
		return 0, err
	}
	return p.inner.Add(ctx, p.join(key), delta)
}

// CompareSet compare-sets prefix/key.
func (p *PrefixStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := p.open("compare_set"); err != nil {
		return nil, err
	}
	return p.inner.CompareSet(ctx, p.join(key), expected, desired)
}

// Check checks the prefixed keys.
func (p *PrefixStore) Check(ctx context.Context, keys []string) (bool, error) {
	if err := p.open("check"); err != nil {
		return false, err
	}
	return p.inner.Check(ctx, p.joinAll(keys))
}

// Wait waits for the prefixed keys.
func (p *PrefixStore) Wait(ctx context.Context, keys []string) error {
	return p.blocking(ctx, "wait", func(ctx context.Context) error {
		return p.inner.Wait(ctx, p.joinAll(keys))
	})
}

// DeleteKey deletes prefix/key.
func (p *PrefixStore) DeleteKey(ctx context.Context, key string) (bool, error) {
	if err := p.open("delete_key"); err != nil {
		return false, err
	}
	return p.inner.DeleteKey(ctx, p.join(key))
}

// NumKeys returns the inner store's count, unfiltered.
func (p *PrefixStore) NumKeys(ctx context.Context) (int64, error) {
	if err := p.open("num_keys"); err != nil {
		return 0, err
	}
	return p.inner.NumKeys(ctx)
}

// Append appends to prefix/key.
func (p *PrefixStore) Append(ctx context.Context, key string, value []byte) error {
	if err := p.open("append"); err != nil {
		return err
	}
	return p.inner.Append(ctx, p.join(key), value)
}

// MultiGet gets the prefixed keys.
func (p *PrefixStore) MultiGet(ctx context.Context, keys []string) ([][]byte, error) {
	var v [][]byte
	err := p.blocking(ctx, "multi_get", func(ctx context.Context) (err error) {
		v, err = p.inner.MultiGet(ctx, p.joinAll(keys))
		return err
	})
	return v, err
}

// MultiSet sets the prefixed keys.
func (p *PrefixStore) MultiSet(ctx context.Context, keys []string, values [][]byte) error {
	if err := p.open("multi_set"); err != nil {
		return err
	}
	return p.inner.MultiSet(ctx, p.joinAll(keys), values)
}

// ListKeys lists the inner keys that start with the prefix, stripped of
// prefix and separator (see PrefixStore for the quirk this keeps).
func (p *PrefixStore) ListKeys(ctx context.Context) ([]string, error) {
	if err := p.open("list_keys"); err != nil {
		return nil, err
	}
	all, err := p.inner.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(all))
	for _, k := range all {
		if strings.HasPrefix(k, p.prefix) && len(k) > len(p.prefix) {
			out = append(out, k[len(p.prefix)+1:])
		}
	}
	return out, nil
}

// QueuePush pushes onto the queue prefix/key.
func (p *PrefixStore) QueuePush(ctx context.Context, key string, value []byte) error {
	if err := p.open("queue_push"); err != nil {
		return err
	}
	return p.inner.QueuePush(ctx, p.join(key), value)
}

// QueuePop pops from the queue prefix/key.
func (p *PrefixStore) QueuePop(ctx context.Context, key string, block bool) ([]byte, error) {
	var v []byte
	err := p.blocking(ctx, "queue_pop", func(ctx context.Context) (err error) {
		v, err = p.inner.QueuePop(ctx, p.join(key), block)
		return err
	})
	return v, err
}

// QueueLen returns the length of the queue prefix/key.
func (p *PrefixStore) QueueLen(ctx context.Context, key string) (int64, error) {
	if err := p.open("queue_len"); err != nil {
		return 0, err
	}
	return p.inner.QueueLen(ctx, p.join(key))
}

// Clone returns PrefixStore(prefix, inner.Clone()); the clone owns (and
// closes) its inner clone.
func (p *PrefixStore) Clone(ctx context.Context) (Store, error) {
	if err := p.open("clone"); err != nil {
		return nil, err
	}
	inner, err := p.inner.Clone(ctx)
	if err != nil {
		return nil, err
	}
	return newPrefix(p.prefix, inner, true), nil
}

// Timeout returns the inner store's timeout.
func (p *PrefixStore) Timeout() time.Duration { return p.inner.Timeout() }

// SetTimeout sets the inner store's timeout.
func (p *PrefixStore) SetTimeout(d time.Duration) { p.inner.SetTimeout(d) }

// Close closes this view (and the inner store if this is a Clone). It is
// idempotent.
func (p *PrefixStore) Close() error {
	var err error
	p.once.Do(func() {
		close(p.closed)
		p.cancel()
		if p.ownsInner {
			err = p.inner.Close()
		}
	})
	return err
}
