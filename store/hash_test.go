package store

import (
	"testing"
	"time"
)

func newTestHashStore(t *testing.T) Store {
	h := NewHashStore(10 * time.Second)
	t.Cleanup(func() { h.Close() })
	return h
}

func TestHashStore(t *testing.T) {
	t.Parallel()
	runStoreSuite(t, newTestHashStore, suiteTraits{})
}
