package store

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// hashState is the map shared by a HashStore and its clones.
type hashState struct {
	mu      sync.Mutex
	kv      map[string][]byte
	queues  map[string][][]byte
	changed chan struct{} // closed and replaced on every write; guarded by mu
}

// notifyLocked wakes every waiter. Called with s.mu held.
func (s *hashState) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// presentLocked reports whether key exists as a value or a non-empty queue.
// Called with s.mu held.
func (s *hashState) presentLocked(key string) bool {
	if _, ok := s.kv[key]; ok {
		return true
	}
	return len(s.queues[key]) > 0
}

// HashStore is an in-process Store: a map guarded by a mutex, with waiters
// woken on every write. It follows torch's HashStore, except that Add also
// wakes waiters (torch's does not, which leaves a waiter on an Add-created key
// asleep until its timeout).
//
// A timeout of 0 means "no timeout": waits then end only with ctx or Close.
// Clone returns a new handle on the same map, with its own timeout and Close.
type HashStore struct {
	s       *hashState
	timeout atomic.Int64 // time.Duration
	closed  chan struct{}
	once    sync.Once
}

var _ Store = (*HashStore)(nil)

// NewHashStore returns an empty HashStore with the given default timeout.
func NewHashStore(timeout time.Duration) *HashStore {
	st := &hashState{
		kv:      make(map[string][]byte),
		queues:  make(map[string][][]byte),
		changed: make(chan struct{}),
	}
	return newHashHandle(st, timeout)
}

func newHashHandle(st *hashState, timeout time.Duration) *HashStore {
	h := &HashStore{s: st, closed: make(chan struct{})}
	h.timeout.Store(int64(timeout))
	return h
}

// Timeout returns the default timeout.
func (h *HashStore) Timeout() time.Duration { return time.Duration(h.timeout.Load()) }

// SetTimeout sets the default timeout (0: no timeout).
func (h *HashStore) SetTimeout(d time.Duration) { h.timeout.Store(int64(d)) }

// Close makes this handle's pending and later operations fail with
// ErrClosed. Other handles (clones) keep working. It is idempotent.
func (h *HashStore) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

// Clone returns a new handle on the same map.
func (h *HashStore) Clone(ctx context.Context) (Store, error) {
	if err := h.begin(ctx, "clone", nil); err != nil {
		return nil, err
	}
	return newHashHandle(h.s, h.Timeout()), nil
}

// begin checks that the handle is open and ctx is not done.
func (h *HashStore) begin(ctx context.Context, op string, keys []string) error {
	select {
	case <-h.closed:
		return &OpError{Store: "hash", Op: op, Keys: keys, Err: ErrClosed}
	default:
	}
	if err := ctx.Err(); err != nil {
		return &OpError{Store: "hash", Op: op, Keys: keys, Err: err}
	}
	return nil
}

// waitFor blocks until ready (called with h.s.mu held) returns true, then
// returns with h.s.mu held and nil; otherwise it returns with the mutex
// released and an error.
func (h *HashStore) waitFor(ctx context.Context, op string, keys []string, ready func() bool) error {
	d := newDeadline(ctx, h.Timeout(), true)
	h.s.mu.Lock()
	for !ready() {
		ch := h.s.changed
		h.s.mu.Unlock()
		if err := d.sleep(ctx, ch, 0, h.closed); err != nil {
			if err == errWaitDeadline {
				return d.timeout(op, keys)
			}
			return &OpError{Store: "hash", Op: op, Keys: keys, Err: err}
		}
		h.s.mu.Lock()
	}
	return nil
}

// Set stores a copy of value under key and wakes waiters.
func (h *HashStore) Set(ctx context.Context, key string, value []byte) error {
	if err := h.begin(ctx, "set", []string{key}); err != nil {
		return err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.kv[key] = cloneBytes(value)
	h.s.notifyLocked()
	return nil
}

// Get waits for key and returns a copy of its value.
func (h *HashStore) Get(ctx context.Context, key string) ([]byte, error) {
	keys := []string{key}
	if err := h.begin(ctx, "get", keys); err != nil {
		return nil, err
	}
	var v []byte
	if err := h.waitFor(ctx, "get", keys, func() bool {
		var ok bool
		v, ok = h.s.kv[key]
		return ok
	}); err != nil {
		return nil, err
	}
	defer h.s.mu.Unlock()
	return cloneBytes(v), nil
}

// Add adds delta to the integer under key (see Store.Add) and wakes waiters.
func (h *HashStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := h.begin(ctx, "add", []string{key}); err != nil {
		return 0, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	cur, ok := h.s.kv[key]
	n, err := addValue(cur, ok, delta, true)
	if err != nil {
		return 0, &OpError{Store: "hash", Op: "add", Keys: []string{key}, Err: err}
	}
	h.s.kv[key] = []byte(formatInt(n))
	h.s.notifyLocked()
	return n, nil
}

// CompareSet applies torch's compare_set rules (see Store.CompareSet).
func (h *HashStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := h.begin(ctx, "compare_set", []string{key}); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	cur, ok := h.s.kv[key]
	reply, store := compareSetResult(cur, ok, expected, desired)
	if store {
		h.s.kv[key] = cloneBytes(desired)
		h.s.notifyLocked()
	}
	return cloneBytes(reply), nil
}

// Check reports whether all keys exist (values or non-empty queues).
func (h *HashStore) Check(ctx context.Context, keys []string) (bool, error) {
	if err := h.begin(ctx, "check", keys); err != nil {
		return false, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.allPresentLocked(keys), nil
}

func (h *HashStore) allPresentLocked(keys []string) bool {
	for _, k := range keys {
		if !h.s.presentLocked(k) {
			return false
		}
	}
	return true
}

// Wait blocks until all keys exist (values or non-empty queues).
func (h *HashStore) Wait(ctx context.Context, keys []string) error {
	if err := h.begin(ctx, "wait", keys); err != nil {
		return err
	}
	if err := h.waitFor(ctx, "wait", keys, func() bool { return h.allPresentLocked(keys) }); err != nil {
		return err
	}
	h.s.mu.Unlock()
	return nil
}

// DeleteKey removes key and reports whether it existed. Waiters are not woken.
func (h *HashStore) DeleteKey(ctx context.Context, key string) (bool, error) {
	if err := h.begin(ctx, "delete_key", []string{key}); err != nil {
		return false, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	_, ok := h.s.kv[key]
	delete(h.s.kv, key)
	return ok, nil
}

// NumKeys returns the number of keys (queues are not counted).
func (h *HashStore) NumKeys(ctx context.Context) (int64, error) {
	if err := h.begin(ctx, "num_keys", nil); err != nil {
		return 0, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return int64(len(h.s.kv)), nil
}

// Append appends value to key's value (creating it) and wakes waiters.
func (h *HashStore) Append(ctx context.Context, key string, value []byte) error {
	if err := h.begin(ctx, "append", []string{key}); err != nil {
		return err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	cur := h.s.kv[key]
	h.s.kv[key] = append(cloneBytes(cur), value...)
	h.s.notifyLocked()
	return nil
}

// MultiGet waits for all keys with one deadline and returns copies of their
// values.
func (h *HashStore) MultiGet(ctx context.Context, keys []string) ([][]byte, error) {
	if err := h.begin(ctx, "multi_get", keys); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	if err := h.waitFor(ctx, "multi_get", keys, func() bool {
		for _, k := range keys {
			if _, ok := h.s.kv[k]; !ok {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	defer h.s.mu.Unlock()
	for i, k := range keys {
		out[i] = cloneBytes(h.s.kv[k])
	}
	return out, nil
}

// MultiSet sets every key to its value, then wakes waiters.
func (h *HashStore) MultiSet(ctx context.Context, keys []string, values [][]byte) error {
	if err := h.begin(ctx, "multi_set", keys); err != nil {
		return err
	}
	if len(keys) != len(values) {
		return &OpError{Store: "hash", Op: "multi_set", Err: errf(ErrInvalid, "%d keys but %d values", len(keys), len(values))}
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	for i, k := range keys {
		h.s.kv[k] = cloneBytes(values[i])
	}
	h.s.notifyLocked()
	return nil
}

// ListKeys returns the keys, sorted (queues are not listed).
func (h *HashStore) ListKeys(ctx context.Context) ([]string, error) {
	if err := h.begin(ctx, "list_keys", nil); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	keys := make([]string, 0, len(h.s.kv))
	for k := range h.s.kv {
		keys = append(keys, k)
	}
	h.s.mu.Unlock()
	sort.Strings(keys)
	return keys, nil
}

// QueuePush appends a copy of value to the queue named key and wakes waiters.
func (h *HashStore) QueuePush(ctx context.Context, key string, value []byte) error {
	if err := h.begin(ctx, "queue_push", []string{key}); err != nil {
		return err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.queues[key] = append(h.s.queues[key], cloneBytes(value))
	h.s.notifyLocked()
	return nil
}

// QueuePop removes and returns the head of the queue named key (see
// Store.QueuePop).
func (h *HashStore) QueuePop(ctx context.Context, key string, block bool) ([]byte, error) {
	keys := []string{key}
	if err := h.begin(ctx, "queue_pop", keys); err != nil {
		return nil, err
	}
	nonEmpty := func() bool { return len(h.s.queues[key]) > 0 }
	if block {
		if err := h.waitFor(ctx, "queue_pop", keys, nonEmpty); err != nil {
			return nil, err
		}
	} else {
		h.s.mu.Lock()
		if !nonEmpty() {
			h.s.mu.Unlock()
			return nil, &OpError{Store: "hash", Op: "queue_pop", Keys: keys, Err: errf(ErrNotFound, "queue is empty")}
		}
	}
	defer h.s.mu.Unlock()
	q := h.s.queues[key]
	v := q[0]
	q[0] = nil
	if len(q) == 1 {
		delete(h.s.queues, key)
	} else {
		h.s.queues[key] = q[1:]
	}
	return v, nil
}

// QueueLen returns the length of the queue named key.
func (h *HashStore) QueueLen(ctx context.Context, key string) (int64, error) {
	if err := h.begin(ctx, "queue_len", []string{key}); err != nil {
		return 0, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return int64(len(h.s.queues[key])), nil
}
