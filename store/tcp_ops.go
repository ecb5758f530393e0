package store

import (
	"context"
	"strings"
)

// This file holds TCPStore's Store methods: how each maps to wire requests
// (reference §1.5).

// wire returns the wire keys ("/" + key) and checks them and values against
// torch libuv's limits, so a request never makes a torch server drop the
// connection for size.
func wire(keys []string, values ...[]byte) ([]string, error) {
	if len(keys) > defaultLimits.maxKeys {
		return nil, errf(ErrInvalid, "%d keys exceed the server limit of %d", len(keys), defaultLimits.maxKeys)
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		if len(k)+len(keyPrefix) > defaultLimits.maxKeyLen {
			return nil, errf(ErrInvalid, "key of %d bytes exceeds the server limit of %d", len(k), defaultLimits.maxKeyLen-1)
		}
		out[i] = keyPrefix + k
	}
	for _, v := range values {
		if len(v) > defaultLimits.maxValueLen {
			return nil, errf(ErrInvalid, "value of %d bytes exceeds the server limit of %d", len(v), defaultLimits.maxValueLen)
		}
	}
	return out, nil
}

// prepare validates keys and values for op, returning the wire keys.
func (t *TCPStore) prepare(op string, keys []string, values ...[]byte) ([]string, error) {
	w, err := wire(keys, values...)
	if err != nil {
		return nil, t.opErr(op, keys, err)
	}
	return w, nil
}

// Set sends SET (no reply).
func (t *TCPStore) Set(ctx context.Context, key string, value []byte) error {
	keys := []string{key}
	w, err := t.prepare("set", keys, value)
	if err != nil {
		return err
	}
	return t.do(ctx, "set", keys, request{cmd: cmdSet, keys: w, values: [][]byte{value}}, nil)
}

// Get sends WAIT then GET.
func (t *TCPStore) Get(ctx context.Context, key string) ([]byte, error) {
	keys := []string{key}
	w, err := t.prepare("get", keys)
	if err != nil {
		return nil, err
	}
	var v []byte
	wd := newDeadline(ctx, t.Timeout(), false)
	err = t.session(ctx, "get", keys, func(s *sess) error {
		if err := t.waitKeys(ctx, s, wd, "get", keys, w); err != nil {
			return err
		}
		if err := t.send(s.conn, request{cmd: cmdGet, keys: w}); err != nil {
			return err
		}
		v, err = newReplyDecoder(t.br).value()
		return err
	})
	return v, err
}

// Add sends ADD and returns the new value.
func (t *TCPStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	keys := []string{key}
	w, err := t.prepare("add", keys)
	if err != nil {
		return 0, err
	}
	var n int64
	err = t.do(ctx, "add", keys, request{cmd: cmdAdd, keys: w, num: delta},
		func(d *decoder) (err error) { n, err = d.i64(); return err })
	return n, err
}

// CompareSet sends COMPARE_SET.
func (t *TCPStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	keys := []string{key}
	w, err := t.prepare("compare_set", keys, expected, desired)
	if err != nil {
		return nil, err
	}
	var v []byte
	err = t.do(ctx, "compare_set", keys, request{cmd: cmdCompareSet, keys: w, values: [][]byte{expected, desired}},
		func(d *decoder) (err error) { v, err = d.value(); return err })
	return v, err
}

// Check sends CHECK.
func (t *TCPStore) Check(ctx context.Context, keys []string) (bool, error) {
	w, err := t.prepare("check", keys)
	if err != nil {
		return false, err
	}
	var b byte
	err = t.do(ctx, "check", keys, request{cmd: cmdCheck, keys: w}, func(d *decoder) (err error) {
		if b, err = d.u8(); err == nil && b != checkReady && b != checkNotReady {
			err = errf(ErrProtocol, "CHECK reply %d", b)
		}
		return err
	})
	return err == nil && b == checkReady, err
}

// Wait sends WAIT (and CANCEL_WAIT if it times out).
func (t *TCPStore) Wait(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	w, err := t.prepare("wait", keys)
	if err != nil {
		return err
	}
	wd := newDeadline(ctx, t.Timeout(), false)
	return t.session(ctx, "wait", keys, func(s *sess) error {
		return t.waitKeys(ctx, s, wd, "wait", keys, w)
	})
}

// DeleteKey sends DELETE_KEY.
func (t *TCPStore) DeleteKey(ctx context.Context, key string) (bool, error) {
	keys := []string{key}
	w, err := t.prepare("delete_key", keys)
	if err != nil {
		return false, err
	}
	var n int64
	err = t.do(ctx, "delete_key", keys, request{cmd: cmdDeleteKey, keys: w},
		func(d *decoder) (err error) { n, err = d.i64(); return err })
	return n == 1, err
}

// NumKeys sends GETNUMKEYS; the count includes "init/" and barrier keys.
func (t *TCPStore) NumKeys(ctx context.Context) (int64, error) {
	var n int64
	err := t.do(ctx, "num_keys", nil, request{cmd: cmdGetNumKeys},
		func(d *decoder) (err error) { n, err = d.i64(); return err })
	return n, err
}

// Append sends APPEND (no reply).
func (t *TCPStore) Append(ctx context.Context, key string, value []byte) error {
	keys := []string{key}
	w, err := t.prepare("append", keys, value)
	if err != nil {
		return err
	}
	return t.do(ctx, "append", keys, request{cmd: cmdAppend, keys: w, values: [][]byte{value}}, nil)
}

// MultiGet sends WAIT for all keys, then MULTI_GET.
func (t *TCPStore) MultiGet(ctx context.Context, keys []string) ([][]byte, error) {
	w, err := t.prepare("multi_get", keys)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return [][]byte{}, nil
	}
	out := make([][]byte, 0, len(keys))
	wd := newDeadline(ctx, t.Timeout(), false)
	err = t.session(ctx, "multi_get", keys, func(s *sess) error {
		if err := t.waitKeys(ctx, s, wd, "multi_get", keys, w); err != nil {
			return err
		}
		if err := t.send(s.conn, request{cmd: cmdMultiGet, keys: w}); err != nil {
			return err
		}
		d := newReplyDecoder(t.br)
		for range keys {
			v, err := d.value()
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MultiSet sends MULTI_SET (no reply).
func (t *TCPStore) MultiSet(ctx context.Context, keys []string, values [][]byte) error {
	if len(keys) != len(values) {
		return t.opErr("multi_set", nil, errf(ErrInvalid, "%d keys but %d values", len(keys), len(values)))
	}
	w, err := t.prepare("multi_set", keys, values...)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	return t.do(ctx, "multi_set", keys, request{cmd: cmdMultiSet, keys: w, values: values}, nil)
}

// ListKeys sends LIST_KEYS and returns the user keys (wire keys that start
// with "/", without it; "init/" and other raw keys are dropped, as torch's
// client does).
func (t *TCPStore) ListKeys(ctx context.Context) ([]string, error) {
	var keys []string
	err := t.do(ctx, "list_keys", nil, request{cmd: cmdListKeys}, func(d *decoder) error {
		n, err := d.i64()
		if err != nil {
			return err
		}
		if n < 0 || n > int64(replyLimits.maxKeys) {
			return errf(ErrProtocol, "LIST_KEYS count %d", n)
		}
		keys = make([]string, 0, min(n, 1<<16))
		for range n {
			k, err := d.key()
			if err != nil {
				return err
			}
			if rest, ok := strings.CutPrefix(k, keyPrefix); ok {
				keys = append(keys, rest)
			}
		}
		return nil
	})
	return keys, err
}

// queues fails with ErrNotSupported for a classic torch server.
func (t *TCPStore) queues(op string, key string) error {
	if t.opts.LegacyServer {
		return t.opErr(op, []string{key}, errf(ErrNotSupported, "queues are not implemented by the legacy TCPStore server"))
	}
	return nil
}

// QueuePush sends QUEUE_PUSH (no reply).
func (t *TCPStore) QueuePush(ctx context.Context, key string, value []byte) error {
	if err := t.queues("queue_push", key); err != nil {
		return err
	}
	keys := []string{key}
	w, err := t.prepare("queue_push", keys, value)
	if err != nil {
		return err
	}
	return t.do(ctx, "queue_push", keys, request{cmd: cmdQueuePush, keys: w, values: [][]byte{value}}, nil)
}

// QueuePop sends QUEUE_POP, after a WAIT on the queue if block is set. A
// blocking pop that loses the race for the value to another consumer waits
// again until its deadline.
func (t *TCPStore) QueuePop(ctx context.Context, key string, block bool) ([]byte, error) {
	if err := t.queues("queue_pop", key); err != nil {
		return nil, err
	}
	keys := []string{key}
	w, err := t.prepare("queue_pop", keys)
	if err != nil {
		return nil, err
	}
	var v []byte
	wd := newDeadline(ctx, t.Timeout(), false)
	err = t.session(ctx, "queue_pop", keys, func(s *sess) error {
		for {
			if block {
				if err := t.waitKeys(ctx, s, wd, "queue_pop", keys, w); err != nil {
					return err
				}
			}
			if err := t.send(s.conn, request{cmd: cmdQueuePop, keys: w}); err != nil {
				return err
			}
			d := newReplyDecoder(t.br)
			n, err := d.i64()
			if err != nil {
				return err
			}
			if n > 0 {
				v, err = d.value()
				return err
			}
			if !block {
				return errf(ErrNotFound, "queue is empty")
			}
		}
	})
	return v, err
}

// QueueLen sends QUEUE_LEN.
func (t *TCPStore) QueueLen(ctx context.Context, key string) (int64, error) {
	if err := t.queues("queue_len", key); err != nil {
		return 0, err
	}
	keys := []string{key}
	w, err := t.prepare("queue_len", keys)
	if err != nil {
		return 0, err
	}
	var n int64
	err = t.do(ctx, "queue_len", keys, request{cmd: cmdQueueLen, keys: w},
		func(d *decoder) (err error) { n, err = d.i64(); return err })
	return n, err
}
