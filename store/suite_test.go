package store

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// suiteTraits describes where a store legitimately differs from the others
// (each difference is torch's).
type suiteTraits struct {
	baseKeys         int64    // NumKeys of a fresh store ("init/", "refcount/")
	baseList         []string // ListKeys of a fresh store
	addBadDropsConn  bool     // TCPStore: ADD on a non-numeric or empty value kills the connection
	deleteAlwaysTrue bool     // FileStore
	noQueues         bool     // FileStore: queues give ErrNotSupported
	zeroTimeoutFails bool     // TCPStore: timeout 0 makes waits fail at once (others: no timeout)
}

// short is the deadline of operations that are expected to time out.
const short = 50 * time.Millisecond

// bg returns a context that bounds a test step that must not time out.
func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), short)
	t.Cleanup(cancel)
	return ctx
}

// requireTimeout checks err is a *TimeoutError naming keys.
func requireTimeout(t *testing.T, err error, keys ...string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrTimeout)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.True(t, te.Timeout())
	var to interface{ Timeout() bool }
	require.ErrorAs(t, err, &to)
	assert.True(t, to.Timeout())
	for _, k := range keys {
		found := false
		for _, got := range te.Keys {
			found = found || strings.HasSuffix(got, k) // a PrefixStore reports joined keys
		}
		assert.True(t, found, "timeout error %q does not name key %q", err, k)
	}
	assert.Regexp(t, `^store: \S+ timed out after `, err.Error())
}

// runStoreSuite runs the conformance cases (those of torch's
// test/distributed/test_store.py StoreTestBase and TestMultiThreadedWait,
// plus contract checks) against stores made by newStore. newStore must
// return a fresh, empty store and arrange for it to be closed.
func runStoreSuite(t *testing.T, newStore func(t *testing.T) Store, tr suiteTraits) {
	t.Run("set_get_check", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		n, err := s.Add(ctx, "key", 5)
		require.NoError(t, err)
		assert.EqualValues(t, 5, n)
		n, err = s.Add(ctx, "key", 6)
		require.NoError(t, err)
		assert.EqualValues(t, 11, n)
		_, err = s.Add(ctx, "key3", 6)
		require.NoError(t, err)
		require.NoError(t, s.Set(ctx, "key0", []byte("value0")))
		require.NoError(t, s.Set(ctx, "key1", []byte("value1")))
		require.NoError(t, s.Set(ctx, "key2", []byte("value2")))
		num, err := s.NumKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, tr.baseKeys+5, num)
		for k, want := range map[string]string{"key": "11", "key3": "6", "key0": "value0", "key1": "value1", "key2": "value2"} {
			v, err := s.Get(ctx, k)
			require.NoError(t, err)
			assert.Equal(t, want, string(v), k)
		}
		ok, err := s.Check(ctx, []string{"key0", "key1", "key3"})
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = s.Check(ctx, []string{"key0", "nokey"})
		require.NoError(t, err)
		assert.False(t, ok)
		ok, err = s.Check(ctx, nil)
		require.NoError(t, err)
		assert.True(t, ok)
		// "-key3" is a tombstone-looking key for FileStore.
		require.NoError(t, s.Set(ctx, "-key3", []byte("7")))
		v, err := s.Get(ctx, "-key3")
		require.NoError(t, err)
		assert.Equal(t, "7", string(v))
		deleted, err := s.DeleteKey(ctx, "-key3")
		require.NoError(t, err)
		assert.True(t, deleted)
		num, err = s.NumKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, tr.baseKeys+5, num)
		v, err = s.Get(ctx, "key3")
		require.NoError(t, err)
		assert.Equal(t, "6", string(v))
	})

	t.Run("compare_set", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		require.NoError(t, s.Set(ctx, "empty", []byte{}))
		tests := []struct {
			name                  string
			key, expected, desire string
			want, after           string
			present               bool
		}{
			{"missing_wrong_expected", "cs_key0", "wrong_old_value", "new_value0", "wrong_old_value", "", false},
			{"missing_empty_expected", "cs_key0", "", "first_value", "first_value", "first_value", true},
			{"present_match", "cs_key0", "first_value", "new_value", "new_value", "new_value", true},
			{"present_mismatch", "cs_key0", "first_value", "other", "new_value", "new_value", true},
			{"present_empty_matches_empty", "empty", "", "filled", "filled", "filled", true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.CompareSet(ctx, tc.key, []byte(tc.expected), []byte(tc.desire))
				require.NoError(t, err)
				assert.Equal(t, tc.want, string(got))
				ok, err := s.Check(ctx, []string{tc.key})
				require.NoError(t, err)
				require.Equal(t, tc.present, ok)
				if tc.present {
					v, err := s.Get(ctx, tc.key)
					require.NoError(t, err)
					assert.Equal(t, tc.after, string(v))
				}
			})
		}
	})

	t.Run("simple_wait", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		err := s.Wait(shortCtx(t), []string{"bad_key"})
		requireTimeout(t, err, "bad_key")
		_, err = s.Add(ctx, "good_key", 1)
		require.NoError(t, err)
		require.NoError(t, s.Wait(ctx, []string{"good_key"}))
		require.NoError(t, s.Wait(ctx, nil))
		// The store stays usable after a timeout.
		v, err := s.Get(ctx, "good_key")
		require.NoError(t, err)
		assert.Equal(t, "1", string(v))
	})

	t.Run("timeout_sources", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		assert.Equal(t, 10*time.Second, s.Timeout())
		// The store timeout applies when ctx has no deadline...
		s.SetTimeout(short)
		assert.Equal(t, short, s.Timeout())
		_, err := s.Get(context.Background(), "missing")
		requireTimeout(t, err, "missing")
		var te *TimeoutError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, "get", te.Op)
		assert.Equal(t, short, te.After)
		// ...and ctx's deadline wins over it.
		s.SetTimeout(time.Hour)
		_, err = s.MultiGet(shortCtx(t), []string{"a", "missing"})
		requireTimeout(t, err, "a", "missing")
		s.SetTimeout(0)
		if tr.zeroTimeoutFails {
			requireTimeout(t, s.Wait(context.Background(), []string{"missing"}), "missing")
		} else {
			requireTimeout(t, s.Wait(shortCtx(t), []string{"missing"}), "missing")
		}
		require.NoError(t, s.Set(ctx, "present", []byte("x")))
		require.NoError(t, s.Wait(ctx, []string{"present"}))
		v, err := s.Get(context.Background(), "present")
		require.NoError(t, err)
		assert.Equal(t, "x", string(v))
	})

	t.Run("ctx_cancel", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { _, err := s.Get(ctx, "never"); errc <- err }()
		cancel()
		err := <-errc
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrTimeout)
		// Still usable.
		require.NoError(t, s.Set(bg(t), "after", []byte("1")))
		ok, err := s.Check(bg(t), []string{"after"})
		require.NoError(t, err)
		assert.True(t, ok)
	})

	t.Run("get_blocks_until_set", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		other, err := s.Clone(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { other.Close() })
		got := make(chan []byte, 1)
		errc := make(chan error, 1)
		go func() {
			v, err := other.Get(ctx, "late")
			errc <- err
			got <- v
		}()
		require.NoError(t, s.Set(ctx, "late", []byte("here")))
		require.NoError(t, <-errc)
		assert.Equal(t, "here", string(<-got))
	})

	t.Run("multi_threaded_wait", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for range 2 {
			c, err := s.Clone(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			wg.Go(func() {
				if err := c.Wait(ctx, []string{"k1", "k2"}); err != nil {
					errs <- err
					return
				}
				v, err := c.Get(ctx, "k2")
				if err == nil && string(v) != "v2" {
					err = fmt.Errorf("got %q", v)
				}
				errs <- err
			})
		}
		require.NoError(t, s.Set(ctx, "k1", []byte("v1")))
		require.NoError(t, s.Set(ctx, "k2", []byte("v2")))
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	})

	t.Run("add_parses_like_stoll", func(t *testing.T) {
		tests := []struct {
			name, value string
			want        int64
			bad         bool // no digits: ErrInvalid (or a dropped TCP connection)
			badTCPOnly  bool // empty value: 0 on Hash/File, error on TCP
		}{
			{"digits", "12", 13, false, false},
			{"trailing_garbage", "12abc", 13, false, false},
			{"leading_space", " \t7", 8, false, false},
			{"negative", "-3", -2, false, false},
			{"plus", "+4", 5, false, false},
			{"hex_is_zero", "0x10", 1, false, false},
			{"letters", "abc", 0, true, false},
			{"sign_only", "-", 0, true, false},
			{"overflow", "99999999999999999999", 0, true, false},
			{"empty", "", 1, false, true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				s, ctx := newStore(t), bg(t)
				require.NoError(t, s.Set(ctx, "k", []byte(tc.value)))
				n, err := s.Add(ctx, "k", 1)
				switch {
				case tc.bad || (tc.badTCPOnly && tr.addBadDropsConn):
					require.Error(t, err)
					if tr.addBadDropsConn {
						require.ErrorIs(t, err, ErrConnLost)
					} else {
						require.ErrorIs(t, err, ErrInvalid)
					}
					v, err := s.Get(ctx, "k") // unchanged, and the store still works
					require.NoError(t, err)
					assert.Equal(t, tc.value, string(v))
				default:
					require.NoError(t, err)
					assert.Equal(t, tc.want, n)
					v, err := s.Get(ctx, "k")
					require.NoError(t, err)
					assert.Equal(t, fmt.Sprint(tc.want), string(v))
				}
			})
		}
	})

	t.Run("delete_key", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		require.NoError(t, s.Set(ctx, "d", []byte("1")))
		before, err := s.NumKeys(ctx)
		require.NoError(t, err)
		ok, err := s.DeleteKey(ctx, "d")
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = s.DeleteKey(ctx, "d")
		require.NoError(t, err)
		assert.Equal(t, tr.deleteAlwaysTrue, ok)
		after, err := s.NumKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, before-1, after)
		ok, err = s.Check(ctx, []string{"d"})
		require.NoError(t, err)
		assert.False(t, ok)
		_, err = s.Get(shortCtx(t), "d")
		requireTimeout(t, err, "d")
		n, err := s.Add(ctx, "d", 2) // a deleted key starts again from 0
		require.NoError(t, err)
		assert.EqualValues(t, 2, n)
	})

	t.Run("append", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		require.NoError(t, s.Set(ctx, "foo", []byte("po")))
		require.NoError(t, s.Append(ctx, "foo", []byte("tato")))
		require.NoError(t, s.Append(ctx, "new", []byte("created")))
		vals, err := s.MultiGet(ctx, []string{"foo", "new"})
		require.NoError(t, err)
		assert.Equal(t, [][]byte{[]byte("potato"), []byte("created")}, vals)
	})

	t.Run("multi_set_get", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		require.NoError(t, s.MultiSet(ctx, []string{"foo", "bar", "bin"}, [][]byte{[]byte("po"), []byte(""), []byte{0, 1, 2}}))
		vals, err := s.MultiGet(ctx, []string{"bin", "foo", "bar"})
		require.NoError(t, err)
		assert.Equal(t, [][]byte{{0, 1, 2}, []byte("po"), {}}, vals)
		err = s.MultiSet(ctx, []string{"a", "b"}, [][]byte{[]byte("1")})
		require.ErrorIs(t, err, ErrInvalid)
		require.NoError(t, s.MultiSet(ctx, nil, nil))
		vals, err = s.MultiGet(ctx, nil)
		require.NoError(t, err)
		assert.Empty(t, vals)
	})

	t.Run("values_are_bytes", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		big := bytes.Repeat([]byte{0, 0xff, '/', '-'}, 1<<18) // 1 MiB
		for name, v := range map[string][]byte{"empty": {}, "nul": {0}, "binary": {0xff, 0, 0x80}, "big": big} {
			require.NoError(t, s.Set(ctx, "v/"+name, v))
			got, err := s.Get(ctx, "v/"+name)
			require.NoError(t, err)
			require.True(t, bytes.Equal(v, got), name)
			require.NotNil(t, got, name)
		}
		// Returned slices are the caller's.
		got, err := s.Get(ctx, "v/binary")
		require.NoError(t, err)
		got[0] = 'X'
		again, err := s.Get(ctx, "v/binary")
		require.NoError(t, err)
		assert.Equal(t, []byte{0xff, 0, 0x80}, again)
	})

	t.Run("list_keys", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		keys, err := s.ListKeys(ctx)
		require.NoError(t, err)
		assert.ElementsMatch(t, tr.baseList, keys)
		require.NoError(t, s.Set(ctx, "foo", []byte("1")))
		require.NoError(t, s.Set(ctx, "baz", []byte("2")))
		_, err = s.Add(ctx, "dir/ctr", 1)
		require.NoError(t, err)
		keys, err = s.ListKeys(ctx)
		require.NoError(t, err)
		assert.ElementsMatch(t, append([]string{"foo", "baz", "dir/ctr"}, tr.baseList...), keys)
	})

	t.Run("barrier", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		require.NoError(t, Barrier(ctx, s, "solo", 1))
		const n = 4
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			c, err := s.Clone(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			wg.Go(func() { errs <- Barrier(ctx, c, "group", n) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		requireTimeout(t, Barrier(shortCtx(t), s, "lonely", 2), "lonely/last_member")
		require.ErrorIs(t, Barrier(ctx, s, "bad", 0), ErrInvalid)
	})

	t.Run("clone", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		c, err := s.Clone(ctx)
		require.NoError(t, err)
		require.NoError(t, c.Set(ctx, "from_clone", []byte("x")))
		v, err := s.Get(ctx, "from_clone")
		require.NoError(t, err)
		assert.Equal(t, "x", string(v))
		require.NoError(t, c.Close())
		require.NoError(t, c.Close())
		_, err = c.Get(ctx, "from_clone")
		require.ErrorIs(t, err, ErrClosed)
		v, err = s.Get(ctx, "from_clone") // the original is unaffected
		require.NoError(t, err)
		assert.Equal(t, "x", string(v))
	})

	t.Run("close", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		errc := make(chan error, 1)
		go func() { _, err := s.Get(ctx, "never"); errc <- err }()
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-errc, ErrClosed)
		require.NoError(t, s.Close())
		require.ErrorIs(t, s.Set(ctx, "k", nil), ErrClosed)
		_, err := s.Add(ctx, "k", 1)
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.Clone(ctx)
		require.ErrorIs(t, err, ErrClosed)
	})

	runQueueSuite(t, newStore, tr)
}

// runQueueSuite holds the queue cases (torch's test_queues*).
func runQueueSuite(t *testing.T, newStore func(t *testing.T) Store, tr suiteTraits) {
	if tr.noQueues {
		t.Run("queues_not_supported", func(t *testing.T) {
			s, ctx := newStore(t), bg(t)
			require.ErrorIs(t, s.QueuePush(ctx, "q", []byte("1")), ErrNotSupported)
			_, err := s.QueuePop(ctx, "q", false)
			require.ErrorIs(t, err, ErrNotSupported)
			_, err = s.QueueLen(ctx, "q")
			require.ErrorIs(t, err, ErrNotSupported)
		})
		return
	}
	t.Run("queues", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		ok, err := s.Check(ctx, []string{"foo"})
		require.NoError(t, err)
		assert.False(t, ok)
		n, err := s.QueueLen(ctx, "foo")
		require.NoError(t, err)
		assert.Zero(t, n)
		require.NoError(t, s.QueuePush(ctx, "foo", []byte("1")))
		require.NoError(t, s.QueuePush(ctx, "foo", []byte("2")))
		ok, err = s.Check(ctx, []string{"foo"})
		require.NoError(t, err)
		assert.True(t, ok)
		n, err = s.QueueLen(ctx, "foo")
		require.NoError(t, err)
		assert.EqualValues(t, 2, n)
		require.NoError(t, s.Wait(ctx, []string{"foo"}))
		for _, want := range []string{"1", "2"} {
			v, err := s.QueuePop(ctx, "foo", true)
			require.NoError(t, err)
			assert.Equal(t, want, string(v))
		}
		ok, err = s.Check(ctx, []string{"foo"})
		require.NoError(t, err)
		assert.False(t, ok)
		keys, err := s.NumKeys(ctx) // queues are not keys
		require.NoError(t, err)
		assert.Equal(t, tr.baseKeys, keys)
	})

	t.Run("queues_nonblocking", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		_, err := s.QueuePop(ctx, "foo", false)
		require.ErrorIs(t, err, ErrNotFound)
		assert.Contains(t, err.Error(), "empty")
		require.NoError(t, s.QueuePush(ctx, "foo", []byte("a")))
		v, err := s.QueuePop(ctx, "foo", false)
		require.NoError(t, err)
		assert.Equal(t, "a", string(v))
	})

	t.Run("queues_timeout", func(t *testing.T) {
		s := newStore(t)
		s.SetTimeout(10 * time.Millisecond)
		_, err := s.QueuePop(context.Background(), "foo", true)
		requireTimeout(t, err, "foo")
	})

	t.Run("queues_bidirectional", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		const rounds = 20
		worker := func(st Store, in, out string, errs chan<- error) {
			for i := range rounds {
				if err := st.QueuePush(ctx, out, []byte(fmt.Sprint(i))); err != nil {
					errs <- err
					return
				}
				v, err := st.QueuePop(ctx, in, true)
				if err == nil && string(v) != fmt.Sprint(i) {
					err = fmt.Errorf("%s: got %q, want %d", in, v, i)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}
		a, err := s.Clone(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { a.Close() })
		b, err := s.Clone(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		errs := make(chan error, 2)
		go worker(a, "a_in", "b_in", errs)
		go worker(b, "b_in", "a_in", errs)
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
	})

	t.Run("queue_push_wakes_one_consumer_per_value", func(t *testing.T) {
		s, ctx := newStore(t), bg(t)
		const n = 3
		got := make(chan string, n)
		errs := make(chan error, n)
		for range n {
			c, err := s.Clone(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			go func() {
				v, err := c.QueuePop(ctx, "jobs", true)
				errs <- err
				got <- string(v)
			}()
		}
		for i := range n {
			require.NoError(t, s.QueuePush(ctx, "jobs", []byte(fmt.Sprint(i))))
		}
		var all []string
		for range n {
			require.NoError(t, <-errs)
			all = append(all, <-got)
		}
		assert.ElementsMatch(t, []string{"0", "1", "2"}, all)
		n0, err := s.QueueLen(ctx, "jobs")
		require.NoError(t, err)
		assert.Zero(t, n0)
	})
}
