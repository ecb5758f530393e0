package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTCPLoad runs 64 concurrent clients × 2,000 mixed operations against
// one server and checks that no value is lost or wrong: every client keeps a
// model of its own keys, and shared counters and a shared queue are checked
// against totals at the end.
func TestTCPLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test skipped with -short")
	}
	const clients, ops = 64, 2000
	srv := newTestServer(t, ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var adds, pushes, pops atomic.Int64
	errs := make(chan error, clients)
	stores := make([]*TCPStore, clients)
	for i := range stores {
		s, err := NewTCPStore(ctx, TCPStoreOptions{Port: srv.Port(), Timeout: 30 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() { errs <- loadClient(ctx, s, i, ops, &adds, &pushes, &pops) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	total := clients * ops
	t.Logf("%d clients × %d ops = %d ops in %v: %.0f ops/s", clients, ops, total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds())

	c := stores[0]
	v, err := c.Get(ctx, "shared/ctr")
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(adds.Load()), string(v), "no lost ADD")
	qlen, err := c.QueueLen(ctx, "shared/q")
	require.NoError(t, err)
	assert.Equal(t, pushes.Load(), pops.Load()+qlen, "no lost queue value")
}

// loadClient runs ops mixed operations for client id, checking each reply
// against its model.
func loadClient(ctx context.Context, s Store, id, ops int, adds, pushes, pops *atomic.Int64) error {
	model := map[string]string{}
	var ctr int64
	appLen := 0
	key := func(j int) string { return fmt.Sprintf("c%d/k%d", id, j%16) }
	for j := range ops {
		k := key(j)
		switch j % 12 {
		case 0, 1:
			v := fmt.Sprintf("%d-%d", id, j)
			if err := s.Set(ctx, k, []byte(v)); err != nil {
				return err
			}
			model[k] = v
		case 2, 3:
			k = key(j - 2)
			want, ok := model[k]
			if !ok {
				continue
			}
			got, err := s.Get(ctx, k)
			if err != nil {
				return err
			}
			if string(got) != want {
				return fmt.Errorf("client %d: get %s = %q, want %q", id, k, got, want)
			}
		case 4:
			n, err := s.Add(ctx, fmt.Sprintf("c%d/ctr", id), 1)
			if err != nil {
				return err
			}
			if ctr++; n != ctr {
				return fmt.Errorf("client %d: own counter %d, want %d", id, n, ctr)
			}
			if _, err := s.Add(ctx, "shared/ctr", 1); err != nil {
				return err
			}
			adds.Add(1)
		case 5:
			cur := model[k]
			next := fmt.Sprintf("cs%d", j)
			got, err := s.CompareSet(ctx, k, []byte(cur), []byte(next))
			if err != nil {
				return err
			}
			want := next
			if _, ok := model[k]; !ok && cur != "" {
				want = cur
			}
			if string(got) != want {
				return fmt.Errorf("client %d: compare_set %s = %q, want %q", id, k, got, want)
			}
			model[k] = next
		case 6:
			if err := s.Append(ctx, fmt.Sprintf("c%d/app", id), []byte("xy")); err != nil {
				return err
			}
			appLen += 2
		case 7:
			ks := []string{key(j), key(j + 1)}
			vs := [][]byte{[]byte(fmt.Sprint(j)), []byte(fmt.Sprint(j + 1))}
			if err := s.MultiSet(ctx, ks, vs); err != nil {
				return err
			}
			model[ks[0]], model[ks[1]] = string(vs[0]), string(vs[1])
		case 8:
			ks := make([]string, 0, len(model))
			for mk := range model {
				ks = append(ks, mk)
			}
			got, err := s.MultiGet(ctx, ks)
			if err != nil {
				return err
			}
			for i, mk := range ks {
				if string(got[i]) != model[mk] {
					return fmt.Errorf("client %d: multi_get %s = %q, want %q", id, mk, got[i], model[mk])
				}
			}
		case 9:
			if err := s.QueuePush(ctx, "shared/q", []byte(fmt.Sprint(id))); err != nil {
				return err
			}
			pushes.Add(1)
		case 10:
			_, err := s.QueuePop(ctx, "shared/q", false)
			switch {
			case err == nil:
				pops.Add(1)
			case !errors.Is(err, ErrNotFound):
				return err
			}
		case 11:
			ok, err := s.Check(ctx, []string{k, fmt.Sprintf("c%d/ctr", id)})
			if err != nil {
				return err
			}
			_, have := model[k]
			if ok != (have && ctr > 0) {
				return fmt.Errorf("client %d: check %s = %v", id, k, ok)
			}
		}
	}
	got, err := s.Get(ctx, fmt.Sprintf("c%d/app", id))
	if err != nil {
		return err
	}
	if len(got) != appLen {
		return fmt.Errorf("client %d: append length %d, want %d", id, len(got), appLen)
	}
	return nil
}
