package store

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestFileStore(t *testing.T) Store {
	path := filepath.Join(t.TempDir(), "store")
	f, err := NewFileStore(bg(t), path, -1)
	require.NoError(t, err)
	f.SetTimeout(10 * time.Second)
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFileStore(t *testing.T) {
	t.Parallel()
	runStoreSuite(t, newTestFileStore, suiteTraits{
		baseKeys: 1, baseList: []string{"efcount/"}, deleteAlwaysTrue: true, noQueues: true,
	})
	t.Run("prefix", func(t *testing.T) {
		runStoreSuite(t, func(t *testing.T) Store {
			p, err := NewPrefixStore("pfx", newTestFileStore(t))
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			return p
		}, suiteTraits{baseKeys: 1, deleteAlwaysTrue: true, noQueues: true})
	})
}

func TestFileStoreFormat(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	path := filepath.Join(t.TempDir(), "fs")
	f, err := NewFileStore(ctx, path, -1)
	require.NoError(t, err)
	require.NoError(t, f.Set(ctx, "k", []byte("v")))
	_, err = f.DeleteKey(ctx, "k")
	require.NoError(t, err)
	_, err = f.Add(ctx, "n", -3)
	require.NoError(t, err)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	le := func(n int) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(n)) }
	want := hexBytes(
		le(9), []byte("refcount/"), le(1), []byte("1"),
		le(2), []byte("/k"), le(1), []byte("v"),
		le(3), []byte("-/k"), le(0),
		le(2), []byte("/n"), le(2), []byte("-3"),
	)
	assert.Equal(t, want, got)

	require.NoError(t, f.Close())
	got, err = os.ReadFile(path) // numWorkers -1: the file stays
	require.NoError(t, err)
	assert.Equal(t, hexBytes(want, le(8), []byte("cleanup/"), le(1), []byte("1"), le(9), []byte("refcount/"), le(1), []byte("0")), got)
}

// TestFileStoreRefcount is torch's test_refcount: the last closer removes
// the file.
func TestFileStoreRefcount(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	path := filepath.Join(t.TempDir(), "fs")
	a, err := NewFileStore(ctx, path, 1)
	require.NoError(t, err)
	b, err := NewFileStore(ctx, path, 1)
	require.NoError(t, err)
	n, err := b.NumKeys(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)
	require.NoError(t, a.Close())
	require.FileExists(t, path)
	n, err = b.NumKeys(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, `"refcount/" and "cleanup/"`)
	require.NoError(t, b.Close())
	assert.NoFileExists(t, path)
	require.NoError(t, b.Close())

	// A clone counts as an opener.
	c, err := NewFileStore(ctx, path, 0)
	require.NoError(t, err)
	cl, err := c.Clone(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.FileExists(t, path)
	require.NoError(t, cl.Close())
	assert.NoFileExists(t, path)
}

func TestFileStoreFileAppearsLater(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	path := filepath.Join(t.TempDir(), "fs")
	f, err := NewFileStore(ctx, path, -1)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Set(ctx, "old", []byte("1")))
	require.NoError(t, os.Remove(path))

	_, err = f.Check(shortCtx(t), []string{"old"}) // no file: retried until the deadline
	requireTimeout(t, err, "old")

	got := make(chan []byte, 1)
	errc := make(chan error, 1)
	go func() {
		v, err := f.Get(ctx, "new")
		errc <- err
		got <- v
	}()
	g, err := NewFileStore(ctx, path, -1) // recreates the (shorter) file
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Set(ctx, "new", []byte("fresh")))
	require.NoError(t, <-errc)
	assert.Equal(t, "fresh", string(<-got))
	ok, err := f.Check(ctx, []string{"old"})
	require.NoError(t, err)
	assert.False(t, ok, "the cache was rebuilt from the new file")
}

func TestFileStoreLockContention(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	path := filepath.Join(t.TempDir(), "fs")
	f, err := NewFileStore(ctx, path, -1)
	require.NoError(t, err)
	defer f.Close()
	other, err := os.Open(path)
	require.NoError(t, err)
	defer other.Close()
	ok, err := tryFlock(other, true)
	require.NoError(t, err)
	require.True(t, ok)
	requireTimeout(t, f.Set(shortCtx(t), "k", nil), "k")
	_, err = f.Get(shortCtx(t), "k")
	requireTimeout(t, err, "k")
	require.NoError(t, funlock(other))
	require.NoError(t, f.Set(ctx, "k", []byte("v")))
}

func TestFileStoreCorruptFile(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	path := filepath.Join(t.TempDir(), "fs")
	f, err := NewFileStore(ctx, path, -1)
	require.NoError(t, err)
	defer f.Close()
	fl, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = fl.Write([]byte{5, 0, 0, 0, '/', 'k'}) // a record cut short
	require.NoError(t, err)
	require.NoError(t, fl.Close())
	_, err = f.Check(ctx, []string{"k"})
	require.ErrorIs(t, err, ErrProtocol)
	_, err = f.Get(ctx, "k")
	require.ErrorIs(t, err, ErrProtocol)
}

func TestFileStoreRecords(t *testing.T) {
	t.Parallel()
	recs := []fileRecord{{"refcount/", []byte("1")}, {"/a", []byte{}}, {"/b", []byte{0, 1}}, {"-/a", nil}, {"", []byte("x")}}
	var b []byte
	for _, r := range recs {
		b = appendRecord(b, r.key, r.value)
	}
	for cut := 0; cut <= len(b); cut++ {
		got, n, rest := parseRecords(b[:cut])
		require.Equal(t, cut, n+rest)
		var re []byte
		for _, r := range got {
			re = appendRecord(re, r.key, r.value)
		}
		require.True(t, bytes.Equal(b[:n], re), "cut %d", cut)
	}
	cache := map[string][]byte{}
	got, _, _ := parseRecords(b)
	applyRecords(cache, got)
	assert.Equal(t, map[string][]byte{"refcount/": []byte("1"), "/b": {0, 1}, "": []byte("x")}, cache)
}

func TestFileStoreCloseAfterFileRemoved(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fs")
	f, err := NewFileStore(bg(t), path, 1)
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	require.NoError(t, f.Close())
	assert.NoFileExists(t, path, "Close must not recreate the file")
}
