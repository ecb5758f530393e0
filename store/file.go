package store

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// filePoll is how often FileStore polls the file while waiting for keys,
// for the file to appear, or for a lock (torch polls every 10 ms).
const filePoll = 10 * time.Millisecond

// FileStore is a Store kept in a file shared by all ranks, in torch's
// FileStore format (file_format.go) and with its locking and clean-up, so
// torch and godist processes can share one file:
//
//   - each operation opens the file, takes a whole-file flock (shared to
//     read, exclusive to write), works and closes it; waiting for a lock or
//     for a missing file to appear polls until the deadline;
//   - opening adds 1 to "refcount/"; Close adds 1 to "cleanup/" and -1 to
//     "refcount/", and removes the file if refcount is then 0, numWorkers
//     is >= 0 and cleanup >= numWorkers.
//
// Semantics are torch's: DeleteKey always reports true; NumKeys counts
// "refcount/" and "cleanup/"; ListKeys returns every key with its first byte
// cut (so user keys come back as given, and the counters as "efcount/" and
// "leanup/"); Get and Wait poll every 10 ms. Append, MultiGet and MultiSet
// are done under one lock (torch falls back to compare_set, get and set
// loops with the same results). Queues are not supported (ErrNotSupported).
// A timeout of 0 means no timeout.
type FileStore struct {
	path       string
	numWorkers int
	timeout    atomic.Int64 // time.Duration

	mu    sync.Mutex // guards pos and cache; held during each file operation
	pos   int64      // file offset parsed up to
	cache map[string][]byte

	closed    chan struct{}
	closeOnce sync.Once
}

var _ Store = (*FileStore)(nil)

// NewFileStore opens the store in path (creating the file) and registers
// this opener in "refcount/". numWorkers < 0 means the file is never removed
// (torch's default world_size=-1). Waiting for the file's directory or lock
// is bounded by ctx's deadline, else DefaultTimeout, which is also the
// store's timeout.
func NewFileStore(ctx context.Context, path string, numWorkers int) (*FileStore, error) {
	f := &FileStore{path: path, numWorkers: numWorkers, cache: make(map[string][]byte), closed: make(chan struct{})}
	f.timeout.Store(int64(DefaultTimeout))
	d := newDeadline(ctx, DefaultTimeout, false)
	if _, err := f.addLocked(ctx, d, "new", nil, fileRefcount, 1); err != nil {
		return nil, err
	}
	return f, nil
}

// Path returns the file's path.
func (f *FileStore) Path() string { return f.path }

// Timeout returns the default timeout.
func (f *FileStore) Timeout() time.Duration { return time.Duration(f.timeout.Load()) }

// SetTimeout sets the default timeout (0: no timeout).
func (f *FileStore) SetTimeout(d time.Duration) { f.timeout.Store(int64(d)) }

// Clone opens the same file again (adding to "refcount/").
func (f *FileStore) Clone(ctx context.Context) (Store, error) {
	if isClosed(f.closed) {
		return nil, f.opErr("clone", nil, ErrClosed)
	}
	c, err := NewFileStore(ctx, f.path, f.numWorkers)
	if err != nil {
		return nil, err
	}
	c.SetTimeout(f.Timeout())
	return c, nil
}

// Close fails pending operations with ErrClosed, then, if the file still
// exists, records this opener's exit and removes the file when it is the
// last one (see FileStore). It is idempotent.
func (f *FileStore) Close() error {
	var err error
	f.closeOnce.Do(func() {
		close(f.closed)
		if _, err := os.Stat(f.path); err != nil {
			return // gone already: nothing to record
		}
		to := f.Timeout()
		if to <= 0 {
			to = DefaultTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), to)
		defer cancel()
		d := newDeadline(ctx, to, false)
		err = f.withFile(ctx, d, "close", nil, true, os.O_RDWR, func(fl *os.File) error {
			if err := f.refresh(fl); err != nil {
				return err
			}
			cleanup, err := f.addInFile(fl, fileCleanup, 1)
			if err != nil {
				return err
			}
			ref, err := f.addInFile(fl, fileRefcount, -1)
			if err != nil {
				return err
			}
			if ref == 0 && f.numWorkers >= 0 && cleanup >= int64(f.numWorkers) {
				if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			return nil
		})
	})
	return err
}

func (f *FileStore) opErr(op string, keys []string, err error) error {
	var te *TimeoutError
	if errors.As(err, &te) {
		return err
	}
	return &OpError{Store: "file", Op: op, Keys: keys, Addr: f.path, Err: err}
}

// begin checks that the store is open and ctx is not done, and returns the
// operation's deadline.
func (f *FileStore) begin(ctx context.Context, op string, keys []string) (deadline, error) {
	if isClosed(f.closed) {
		return deadline{}, f.opErr(op, keys, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return deadline{}, f.opErr(op, keys, err)
	}
	return newDeadline(ctx, f.Timeout(), true), nil
}

// withFile opens the file (waiting for it to exist), takes the flock,
// holds f.mu, runs fn, and releases everything. Its waits end at d, with
// ctx, or when the store is closed, except for op "close" (Close itself),
// which does not wait for a missing file.
func (f *FileStore) withFile(ctx context.Context, d deadline, op string, keys []string, exclusive bool, flag int, fn func(*os.File) error) error {
	closing := f.closed
	if op == "close" {
		closing = nil
	}
	var fl *os.File
	for {
		var err error
		fl, err = os.OpenFile(f.path, flag, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return f.opErr(op, keys, err)
		}
		if closing == nil {
			return nil // Close: the file is gone, so there is nothing to record
		}
		if err := d.sleep(ctx, nil, filePoll, closing); err != nil {
			return f.waitErr(d, op, keys, err)
		}
	}
	defer fl.Close()
	for backoff := time.Millisecond; ; backoff = min(2*backoff, filePoll) {
		ok, err := tryFlock(fl, exclusive)
		if err != nil {
			return f.opErr(op, keys, err)
		}
		if ok {
			break
		}
		if err := d.sleep(ctx, nil, backoff, closing); err != nil {
			return f.waitErr(d, op, keys, err)
		}
	}
	defer funlock(fl)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := fn(fl); err != nil {
		return f.opErr(op, keys, err)
	}
	return nil
}

// waitErr maps an error from deadline.sleep.
func (f *FileStore) waitErr(d deadline, op string, keys []string, err error) error {
	if err == errWaitDeadline {
		return d.timeout(op, keys)
	}
	return f.opErr(op, keys, err)
}

// refresh replays the records appended since the last refresh. Called
// with f.mu and the flock held.
func (f *FileStore) refresh(fl *os.File) error {
	st, err := fl.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if size < f.pos { // the file was replaced: start over
		f.pos = 0
		clear(f.cache)
	}
	if size == f.pos {
		return nil
	}
	buf := make([]byte, size-f.pos)
	if _, err := fl.ReadAt(buf, f.pos); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	recs, n, rest := parseRecords(buf)
	applyRecords(f.cache, recs)
	f.pos += int64(n)
	if rest > 0 {
		return errf(ErrProtocol, "truncated record at offset %d of %s", f.pos, f.path)
	}
	return nil
}

// appendRecords writes encoded records at the end of the file. Called with
// the exclusive flock held.
func appendRecords(fl *os.File, b []byte) error {
	if _, err := fl.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	_, err := fl.Write(b)
	return err
}

// addInFile is torch's addHelper for a raw key: refresh must have run.
// Called with f.mu and the exclusive flock held.
func (f *FileStore) addInFile(fl *os.File, key string, delta int64) (int64, error) {
	cur, ok := f.cache[key]
	n, err := addValue(cur, ok, delta, true)
	if err != nil {
		return 0, err
	}
	v := []byte(formatInt(n))
	if err := appendRecords(fl, appendRecord(nil, key, v)); err != nil {
		return 0, err
	}
	f.cache[key] = v
	return n, nil
}

// addLocked runs addHelper on a raw key under the exclusive lock.
func (f *FileStore) addLocked(ctx context.Context, d deadline, op string, keys []string, key string, delta int64) (int64, error) {
	var n int64
	err := f.withFile(ctx, d, op, keys, true, os.O_RDWR|os.O_CREATE, func(fl *os.File) (err error) {
		if err = f.refresh(fl); err == nil {
			n, err = f.addInFile(fl, key, delta)
		}
		return err
	})
	return n, err
}

// lookup runs under the shared lock and returns the value of raw key, if
// present.
func (f *FileStore) lookup(ctx context.Context, d deadline, op string, keys []string, fn func() bool) (bool, error) {
	var ok bool
	err := f.withFile(ctx, d, op, keys, false, os.O_RDONLY, func(fl *os.File) error {
		if err := f.refresh(fl); err != nil {
			return err
		}
		ok = fn()
		return nil
	})
	return ok, err
}

// poll calls lookup every filePoll until fn reports true or the deadline.
func (f *FileStore) poll(ctx context.Context, d deadline, op string, keys []string, fn func() bool) error {
	for {
		ok, err := f.lookup(ctx, d, op, keys, fn)
		if err != nil || ok {
			return err
		}
		if err := d.sleep(ctx, nil, filePoll, f.closed); err != nil {
			return f.waitErr(d, op, keys, err)
		}
	}
}

// has reports whether all user keys are cached. Called with f.mu held.
func (f *FileStore) has(keys []string) bool {
	for _, k := range keys {
		if _, ok := f.cache[filePrefix+k]; !ok {
			return false
		}
	}
	return true
}

// write appends records (key, value) for user keys under the exclusive
// lock, after fn (which may refresh and compute them) returns them.
func (f *FileStore) write(ctx context.Context, op string, keys []string, fn func(fl *os.File) ([]byte, error)) error {
	d, err := f.begin(ctx, op, keys)
	if err != nil {
		return err
	}
	return f.withFile(ctx, d, op, keys, true, os.O_RDWR|os.O_CREATE, func(fl *os.File) error {
		b, err := fn(fl)
		if err != nil || len(b) == 0 {
			return err
		}
		return appendRecords(fl, b)
	})
}

// Set appends a record for key (without reading the file first).
func (f *FileStore) Set(ctx context.Context, key string, value []byte) error {
	if err := checkRecordSize(filePrefix+key, value); err != nil {
		return f.opErr("set", []string{key}, err)
	}
	return f.write(ctx, "set", []string{key}, func(*os.File) ([]byte, error) {
		return appendRecord(nil, filePrefix+key, value), nil
	})
}

// Get polls until key exists and returns a copy of its value.
func (f *FileStore) Get(ctx context.Context, key string) ([]byte, error) {
	keys := []string{key}
	d, err := f.begin(ctx, "get", keys)
	if err != nil {
		return nil, err
	}
	var v []byte
	err = f.poll(ctx, d, "get", keys, func() bool {
		cur, ok := f.cache[filePrefix+key]
		if ok {
			v = cloneBytes(cur)
		}
		return ok
	})
	return v, err
}

// Add adds delta to key's integer (empty value: 0) and returns the result.
func (f *FileStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	d, err := f.begin(ctx, "add", []string{key})
	if err != nil {
		return 0, err
	}
	return f.addLocked(ctx, d, "add", []string{key}, filePrefix+key, delta)
}

// CompareSet applies torch's compare_set rules under the exclusive lock.
func (f *FileStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	var reply []byte
	err := f.write(ctx, "compare_set", []string{key}, func(fl *os.File) ([]byte, error) {
		if err := f.refresh(fl); err != nil {
			return nil, err
		}
		cur, ok := f.cache[filePrefix+key]
		r, store := compareSetResult(cur, ok, expected, desired)
		reply = cloneBytes(r)
		if !store {
			return nil, nil
		}
		return appendRecord(nil, filePrefix+key, desired), nil
	})
	return reply, err
}

// Check reports whether all keys exist.
func (f *FileStore) Check(ctx context.Context, keys []string) (bool, error) {
	d, err := f.begin(ctx, "check", keys)
	if err != nil {
		return false, err
	}
	return f.lookup(ctx, d, "check", keys, func() bool { return f.has(keys) })
}

// Wait polls until all keys exist.
func (f *FileStore) Wait(ctx context.Context, keys []string) error {
	d, err := f.begin(ctx, "wait", keys)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	return f.poll(ctx, d, "wait", keys, func() bool { return f.has(keys) })
}

// DeleteKey appends a tombstone for key and reports true, like torch. The
// file must exist (it is not created).
func (f *FileStore) DeleteKey(ctx context.Context, key string) (bool, error) {
	d, err := f.begin(ctx, "delete_key", []string{key})
	if err != nil {
		return false, err
	}
	err = f.withFile(ctx, d, "delete_key", []string{key}, true, os.O_RDWR, func(fl *os.File) error {
		return appendRecords(fl, appendRecord(nil, fileTombstone+filePrefix+key, nil))
	})
	return err == nil, err
}

// NumKeys returns the number of keys, "refcount/" and "cleanup/" included.
func (f *FileStore) NumKeys(ctx context.Context) (int64, error) {
	d, err := f.begin(ctx, "num_keys", nil)
	if err != nil {
		return 0, err
	}
	var n int64
	_, err = f.lookup(ctx, d, "num_keys", nil, func() bool { n = int64(len(f.cache)); return true })
	return n, err
}

// Append appends value to key's value (creating it) under one lock.
func (f *FileStore) Append(ctx context.Context, key string, value []byte) error {
	return f.write(ctx, "append", []string{key}, func(fl *os.File) ([]byte, error) {
		if err := f.refresh(fl); err != nil {
			return nil, err
		}
		v := append(cloneBytes(f.cache[filePrefix+key]), value...)
		if err := checkRecordSize(filePrefix+key, v); err != nil {
			return nil, err
		}
		return appendRecord(nil, filePrefix+key, v), nil
	})
}

// MultiGet polls until all keys exist and returns copies of their values.
func (f *FileStore) MultiGet(ctx context.Context, keys []string) ([][]byte, error) {
	d, err := f.begin(ctx, "multi_get", keys)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	err = f.poll(ctx, d, "multi_get", keys, func() bool {
		if !f.has(keys) {
			return false
		}
		for i, k := range keys {
			out[i] = cloneBytes(f.cache[filePrefix+k])
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MultiSet appends one record per key under one lock.
func (f *FileStore) MultiSet(ctx context.Context, keys []string, values [][]byte) error {
	if len(keys) != len(values) {
		return f.opErr("multi_set", nil, errf(ErrInvalid, "%d keys but %d values", len(keys), len(values)))
	}
	return f.write(ctx, "multi_set", keys, func(*os.File) ([]byte, error) {
		var b []byte
		for i, k := range keys {
			if err := checkRecordSize(filePrefix+k, values[i]); err != nil {
				return nil, err
			}
			b = appendRecord(b, filePrefix+k, values[i])
		}
		return b, nil
	})
}

// ListKeys returns every key with its first byte removed, sorted (torch's
// quirk: "refcount/" is listed as "efcount/").
func (f *FileStore) ListKeys(ctx context.Context) ([]string, error) {
	d, err := f.begin(ctx, "list_keys", nil)
	if err != nil {
		return nil, err
	}
	var keys []string
	_, err = f.lookup(ctx, d, "list_keys", nil, func() bool {
		for k := range f.cache {
			if len(k) > 0 {
				keys = append(keys, k[1:])
			}
		}
		return true
	})
	sort.Strings(keys)
	return keys, err
}

func (f *FileStore) noQueues(op, key string) error {
	return f.opErr(op, []string{key}, errf(ErrNotSupported, "queue support is not implemented"))
}

// QueuePush fails with ErrNotSupported, like torch's FileStore.
func (f *FileStore) QueuePush(ctx context.Context, key string, value []byte) error {
	return f.noQueues("queue_push", key)
}

// QueuePop fails with ErrNotSupported, like torch's FileStore.
func (f *FileStore) QueuePop(ctx context.Context, key string, block bool) ([]byte, error) {
	return nil, f.noQueues("queue_pop", key)
}

// QueueLen fails with ErrNotSupported, like torch's FileStore.
func (f *FileStore) QueueLen(ctx context.Context, key string) (int64, error) {
	return 0, f.noQueues("queue_len", key)
}
