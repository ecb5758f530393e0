package transport_test

import (
	"testing"

	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/transport/transporttest"
)

func TestMemConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, n int) []transport.Transport {
		net := transport.NewMemNetwork(n)
		trs := make([]transport.Transport, n)
		for i := range trs {
			trs[i] = net.Transport(i)
		}
		t.Cleanup(func() {
			for _, tr := range trs {
				tr.Close()
			}
		})
		return trs
	})
}
