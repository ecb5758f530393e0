package store

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"time"
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
