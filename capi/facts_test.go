package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFacts checks godist_facts' tables: one name per status code, the
// causes by code, and the object as JSON (what python/godist/_lib.py reads).
func TestFacts(t *testing.T) {
	f := collectFacts()
	codes := map[int]string{}
	for name, c := range f.Status {
		require.NotContains(t, codes, c, "status %d named %s and %s", c, name, codes[c])
		codes[c] = name
	}
	assert.Len(t, codes, statusType+1, "every status code from OK to TYPE has a name")
	assert.Len(t, f.Causes, numCauses)
	assert.Equal(t, "desync", f.Causes[causeDesync])
	js, err := json.Marshal(f)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(js, &back))
	for _, key := range []string{"status", "causes", "dtypes", "reduce_ops", "transports", "rendezvous", "nccl",
		"libraries"} {
		assert.Contains(t, back, key)
	}
}
