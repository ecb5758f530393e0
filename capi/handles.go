package main

import (
	"fmt"
	"slices"
	"sync"

	"github.com/godist/godist/libgodist"
)

// handleTable maps opaque uint64 handles, as held by C and Python, to Go
// objects. Handles are never reused, so a stale handle is detected instead
// of aliasing a newer object. Safe for concurrent use.
//
// Handles that C or Python hold for as long as they like (groups, stores,
// works, which a caller may free twice or use after closing) stay here
// rather than in github.com/mattn/go-pointer: its keys are 1-byte malloc
// blocks freed by Unref, which the next Save gets back, so a stale key
// restores whatever object was saved after it. go-pointer suits the user
// data of C callbacks whose lifetime Go controls.
type handleTable struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]any
}

var handles = handleTable{next: 1, m: map[uint64]any{}}

// put registers v and returns its handle (never 0).
func (t *handleTable) put(v any) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.next
	t.next++
	t.m[h] = v
	return h
}

// drop removes h; dropping an unknown handle is a no-op that reports false.
func (t *handleTable) drop(h uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[h]
	delete(t.m, h)
	return ok
}

// count reports how many handles are live (for leak checks).
func (t *handleTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// lookup returns the object behind h if it has type T.
func lookup[T any](h uint64) (T, error) {
	var zero T
	handles.mu.Lock()
	v, ok := handles.m[h]
	handles.mu.Unlock()
	if !ok {
		return zero, fmt.Errorf("%w %d", errInvalidHandle, h)
	}
	t, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("%w %d: it refers to a %T, not a %T", errInvalidHandle, h, v, zero)
	}
	return t, nil
}

// liveGroups returns the process groups in the table, oldest first.
func liveGroups() []*libgodist.ProcessGroup {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	keys := make([]uint64, 0, len(handles.m))
	for h, v := range handles.m {
		if _, ok := v.(*libgodist.ProcessGroup); ok {
			keys = append(keys, h)
		}
	}
	slices.Sort(keys)
	out := make([]*libgodist.ProcessGroup, len(keys))
	for i, h := range keys {
		out[i] = handles.m[h].(*libgodist.ProcessGroup)
	}
	return out
}
