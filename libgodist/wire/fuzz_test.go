package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each fuzz target decodes the input twice: as given (almost always stopped
// by the checksum) and with its checksum trailer recomputed, so mutations
// reach the identifier check, the structural verifier and the semantic
// checks. Neither may panic or reach the recover() fallback, and any
// accepted record must validate and survive a Marshal round trip.
// The committed corpus lives in testdata/fuzz/<FuzzName>/.

func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, ErrMalformed)
		require.NotErrorIs(t, err, errDecoderPanic, "verifier let a bad buffer through: %v", err)
	}
}

func FuzzUnmarshalPeerRecord(f *testing.F) {
	p := samplePeer()
	f.Add(p.Marshal())
	m := PeerRecord{Version: Version, WorldSize: 1}
	f.Add(m.Marshal())
	f.Add([]byte("not a record"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range [][]byte{data, reseal(data)} {
			rec, err := UnmarshalPeerRecord(b)
			checkDecodeErr(t, err)
			if err != nil {
				continue
			}
			require.NoError(t, rec.Validate())
			again, err := UnmarshalPeerRecord(rec.Marshal())
			require.NoError(t, err)
			assert.Equal(t, rec, again)
		}
	})
}

func FuzzUnmarshalHandshake(f *testing.F) {
	h := sampleHandshake()
	f.Add(h.Marshal())
	m := Handshake{Magic: Magic, Version: Version, WorldSize: 1}
	f.Add(m.Marshal())
	f.Add([]byte("GDST"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range [][]byte{data, reseal(data)} {
			got, err := UnmarshalHandshake(b)
			checkDecodeErr(t, err)
			if err != nil {
				continue
			}
			require.NoError(t, got.Validate())
			again, err := UnmarshalHandshake(got.Marshal())
			require.NoError(t, err)
			assert.Equal(t, got, again)
		}
	})
}
