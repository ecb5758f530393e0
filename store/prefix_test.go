package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPrefixStore(t *testing.T) {
	t.Parallel()
	t.Run("hash", func(t *testing.T) {
		runStoreSuite(t, func(t *testing.T) Store {
			p, err := NewPrefixStore("pfx", newTestHashStore(t))
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			return p
		}, suiteTraits{})
	})
	t.Run("tcp", func(t *testing.T) {
		runStoreSuite(t, func(t *testing.T) Store {
			p, err := NewPrefixStore("pfx", newTestClient(t, newTestServer(t, ServerOptions{})))
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			return p
		}, suiteTraits{baseKeys: 1, addBadDropsConn: true, zeroTimeoutFails: true})
	})
}

func TestPrefixStoreKeys(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	inner := NewHashStore(time.Second)
	defer inner.Close()

	// torch's default process-group chain.
	pg, err := NewPrefixStore("default_pg", inner)
	require.NoError(t, err)
	g0, err := NewPrefixStore("0/", pg)
	require.NoError(t, err)
	cpu, err := NewPrefixStore("cpu/", g0)
	require.NoError(t, err)
	require.NoError(t, cpu.Set(ctx, "K", []byte("v")))
	keys, err := inner.ListKeys(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"default_pg/0//cpu//K"}, keys)
	assert.Same(t, inner, cpu.UnderlyingNonPrefix())
	assert.Same(t, g0, cpu.Underlying())
	assert.Equal(t, "cpu/", cpu.Prefix())

	tests := []struct {
		name   string
		prefix string
		inner  []string
		want   []string
	}{
		{"plain", "a", []string{"a/x", "a/y/z", "b/x"}, []string{"x", "y/z"}},
		{"no_slash_check_quirk", "a", []string{"ab/x"}, []string{"/x"}},
		{"key_equal_to_prefix_skipped", "a", []string{"a", "a/"}, []string{""}},
		{"trailing_slash_prefix", "0/", []string{"0//k", "0/k"}, []string{"k", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHashStore(time.Second)
			defer h.Close()
			for _, k := range tc.inner {
				require.NoError(t, h.Set(ctx, k, nil))
			}
			p, err := NewPrefixStore(tc.prefix, h)
			require.NoError(t, err)
			got, err := p.ListKeys(ctx)
			require.NoError(t, err)
			assert.ElementsMatch(t, tc.want, got)
			n, err := p.NumKeys(ctx) // not filtered
			require.NoError(t, err)
			assert.EqualValues(t, len(tc.inner), n)
		})
	}

	t.Run("timeout_delegates", func(t *testing.T) {
		p, err := NewPrefixStore("x", inner)
		require.NoError(t, err)
		p.SetTimeout(3 * time.Second)
		assert.Equal(t, 3*time.Second, inner.Timeout())
		assert.Equal(t, 3*time.Second, p.Timeout())
	})

	t.Run("nil_inner", func(t *testing.T) {
		_, err := NewPrefixStore("x", nil)
		require.ErrorIs(t, err, ErrInvalid)
	})

	t.Run("close_leaves_inner_open", func(t *testing.T) {
		p, err := NewPrefixStore("x", inner)
		require.NoError(t, err)
		require.NoError(t, p.Close())
		require.NoError(t, p.Close())
		require.ErrorIs(t, p.Set(ctx, "k", nil), ErrClosed)
		require.NoError(t, inner.Set(ctx, "k", nil))
	})

	t.Run("timeout_names_joined_keys", func(t *testing.T) {
		err := cpu.Wait(shortCtx(t), []string{"missing"})
		requireTimeout(t, err)
		assert.Contains(t, err.Error(), "default_pg/0//cpu//missing")
	})
}
