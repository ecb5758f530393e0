package store

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Request builders for the state-machine tests.
func rqValidate() request { return request{cmd: cmdValidate, u32: validationMagic} }
func rqSet(k, v string) request {
	return request{cmd: cmdSet, keys: []string{k}, values: [][]byte{[]byte(v)}}
}
func rqAppend(k, v string) request {
	return request{cmd: cmdAppend, keys: []string{k}, values: [][]byte{[]byte(v)}}
}
func rqPush(k, v string) request {
	return request{cmd: cmdQueuePush, keys: []string{k}, values: [][]byte{[]byte(v)}}
}
func rqCS(k, e, d string) request {
	return request{cmd: cmdCompareSet, keys: []string{k}, values: [][]byte{[]byte(e), []byte(d)}}
}
func rqKey(c command, k string) request      { return request{cmd: c, keys: []string{k}} }
func rqKeys(c command, ks ...string) request { return request{cmd: c, keys: ks} }
func rqAdd(k string, n int64) request        { return request{cmd: cmdAdd, keys: []string{k}, num: n} }
func rqBarrier(k string, n int64) request    { return request{cmd: cmdBarrier, keys: []string{k}, num: n} }
func rqBare(c command) request               { return request{cmd: c} }
func rqMultiSet(ks []string, vs ...string) request {
	r := request{cmd: cmdMultiSet, keys: ks}
	for _, v := range vs {
		r.values = append(r.values, []byte(v))
	}
	return r
}

// Reply builders.
func rS(s string) []byte { return appendBytes(nil, []byte(s)) }
func rI(n int64) []byte  { return appendI64(nil, n) }
func rB(b byte) []byte   { return []byte{b} }
func out(c connID, parts ...[]byte) output {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return output{conn: c, data: b}
}

// step is one request from conn (or its disconnection) and what it must
// produce.
type step struct {
	conn       connID
	req        request
	disconnect bool
	want       []output
	wantErr    bool
}

func TestServerState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []step
		check func(t *testing.T, s *serverState)
	}{
		{name: "validate_required", steps: []step{
			{conn: 1, req: rqKey(cmdGet, "/a"), wantErr: true},
		}},
		{name: "validate_wrong_magic", steps: []step{
			{conn: 1, req: request{cmd: cmdValidate, u32: 0x12345678}, wantErr: true},
		}},
		{name: "ping_echo", steps: []step{
			{conn: 1, req: request{cmd: cmdPing, u32: 4242}, want: []output{out(1, binary.LittleEndian.AppendUint32(nil, 4242))}},
		}},
		{name: "set_get", steps: []step{
			{conn: 1, req: rqSet("/a", "1")},
			{conn: 1, req: rqKey(cmdGet, "/a"), want: []output{out(1, rS("1"))}},
			{conn: 1, req: rqKey(cmdGet, "/missing"), want: []output{out(1, rS(""))}},
		}},
		{name: "wait_ready_at_once", steps: []step{
			{conn: 1, req: rqSet("/a", "1")},
			{conn: 1, req: rqKeys(cmdWait, "/a"), want: []output{out(1, rB(waitStop))}},
			{conn: 1, req: rqKeys(cmdWait), want: []output{out(1, rB(waitStop))}},
		}},
		{name: "wait_async_all_keys", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a", "/b")},
			{conn: 2, req: rqSet("/a", "1")},
			{conn: 2, req: rqSet("/b", "1"), want: []output{out(1, rB(waitStop))}},
			{conn: 2, req: rqSet("/b", "2")},
		}},
		{name: "wait_duplicate_keys", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a", "/a")},
			{conn: 2, req: rqSet("/a", "1"), want: []output{out(1, rB(waitStop))}},
		}},
		{name: "cancel_wait", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a")},
			{conn: 1, req: rqBare(cmdCancelWait), want: []output{out(1, rB(waitCanceled))}},
			{conn: 2, req: rqSet("/a", "1")},
			{conn: 1, req: rqBare(cmdCancelWait), want: []output{out(1, rB(waitCanceled))}},
		}},
		{name: "wake_crosses_cancel", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a")},
			{conn: 2, req: rqSet("/a", "1"), want: []output{out(1, rB(waitStop))}},
			{conn: 1, req: rqBare(cmdCancelWait), want: []output{out(1, rB(waitCanceled))}},
		}},
		{name: "disconnect_clears_wait", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a", "/b")},
			{conn: 1, disconnect: true},
			{conn: 2, req: rqSet("/a", "1")},
			{conn: 2, req: rqSet("/b", "1")},
		}, check: func(t *testing.T, s *serverState) {
			assert.Empty(t, s.waiters)
			assert.Zero(t, s.numWaiting())
			assert.NotContains(t, s.conns, connID(1))
		}},
		{name: "second_wait_is_protocol_error", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a")},
			{conn: 1, req: rqKeys(cmdWait, "/b"), wantErr: true},
		}},
		{name: "compare_set_wakes_only_when_stored", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/k")},
			{conn: 2, req: rqCS("/k", "x", "y"), want: []output{out(2, rS("x"))}},
			{conn: 2, req: rqCS("/k", "", "z"), want: []output{out(1, rB(waitStop)), out(2, rS("z"))}},
			{conn: 2, req: rqCS("/k", "z", "w"), want: []output{out(2, rS("w"))}},
			{conn: 2, req: rqCS("/k", "z", "v"), want: []output{out(2, rS("w"))}},
		}},
		{name: "add_stoll", steps: []step{
			{conn: 1, req: rqAdd("/k", 5), want: []output{out(1, rI(5))}},
			{conn: 1, req: rqAdd("/k", -7), want: []output{out(1, rI(-2))}},
			{conn: 1, req: rqSet("/k", " 12abc")},
			{conn: 1, req: rqAdd("/k", 1), want: []output{out(1, rI(13))}},
			{conn: 1, req: rqKey(cmdGet, "/k"), want: []output{out(1, rS("13"))}},
		}},
		{name: "add_empty_value_drops", steps: []step{
			{conn: 1, req: rqSet("/k", "")},
			{conn: 1, req: rqAdd("/k", 1), wantErr: true},
		}},
		{name: "add_non_numeric_drops", steps: []step{
			{conn: 1, req: rqSet("/k", "abc")},
			{conn: 1, req: rqAdd("/k", 1), wantErr: true},
		}},
		{name: "add_wakes", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/k")},
			{conn: 2, req: rqAdd("/k", 1), want: []output{out(1, rB(waitStop)), out(2, rI(1))}},
		}},
		{name: "check_counts_queues", steps: []step{
			{conn: 1, req: rqKeys(cmdCheck, "/a"), want: []output{out(1, rB(checkNotReady))}},
			{conn: 1, req: rqPush("/a", "1")},
			{conn: 1, req: rqSet("/b", "1")},
			{conn: 1, req: rqKeys(cmdCheck, "/a", "/b"), want: []output{out(1, rB(checkReady))}},
			{conn: 1, req: rqKeys(cmdCheck), want: []output{out(1, rB(checkReady))}},
			{conn: 1, req: rqKeys(cmdWait, "/a"), want: []output{out(1, rB(waitStop))}},
		}},
		{name: "num_keys_delete", steps: []step{
			{conn: 1, req: rqAdd(initKey, 1), want: []output{out(1, rI(1))}},
			{conn: 1, req: rqSet("/a", "1")},
			{conn: 1, req: rqPush("/q", "1")},
			{conn: 1, req: rqBare(cmdGetNumKeys), want: []output{out(1, rI(2))}},
			{conn: 1, req: rqKey(cmdDeleteKey, "/a"), want: []output{out(1, rI(1))}},
			{conn: 1, req: rqKey(cmdDeleteKey, "/a"), want: []output{out(1, rI(0))}},
			{conn: 1, req: rqBare(cmdGetNumKeys), want: []output{out(1, rI(1))}},
		}},
		{name: "delete_does_not_wake", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a")},
			{conn: 2, req: rqKey(cmdDeleteKey, "/a"), want: []output{out(2, rI(0))}},
		}, check: func(t *testing.T, s *serverState) { assert.Equal(t, 1, s.numWaiting()) }},
		{name: "append", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a")},
			{conn: 2, req: rqAppend("/a", "po"), want: []output{out(1, rB(waitStop))}},
			{conn: 2, req: rqAppend("/a", "tato")},
			{conn: 2, req: rqKey(cmdGet, "/a"), want: []output{out(2, rS("potato"))}},
		}},
		{name: "multi_set_get", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/a", "/b")},
			{conn: 2, req: rqMultiSet([]string{"/a", "/b"}, "1", "2"), want: []output{out(1, rB(waitStop))}},
			{conn: 2, req: rqKeys(cmdMultiGet, "/b", "/missing", "/a"), want: []output{out(2, rS("2"), rS(""), rS("1"))}},
		}},
		{name: "queues", steps: []step{
			{conn: 1, req: rqKey(cmdQueueLen, "/q"), want: []output{out(1, rI(0))}},
			{conn: 1, req: rqPush("/q", "1")},
			{conn: 1, req: rqPush("/q", "2")},
			{conn: 1, req: rqKey(cmdQueueLen, "/q"), want: []output{out(1, rI(2))}},
			{conn: 1, req: rqKey(cmdQueuePop, "/q"), want: []output{out(1, rI(2), rS("1"))}},
			{conn: 1, req: rqKey(cmdQueuePop, "/q"), want: []output{out(1, rI(1), rS("2"))}},
			{conn: 1, req: rqKey(cmdQueuePop, "/q"), want: []output{out(1, rI(0))}},
		}},
		{name: "queue_push_wakes_one", steps: []step{
			{conn: 1, req: rqKeys(cmdWait, "/q")},
			{conn: 2, req: rqKeys(cmdWait, "/q")},
			{conn: 3, req: rqPush("/q", "1"), want: []output{out(1, rB(waitStop))}},
			{conn: 3, req: rqPush("/q", "2"), want: []output{out(2, rB(waitStop))}},
			{conn: 3, req: rqPush("/q", "3")},
		}},
		{name: "list_keys_raw_sorted", steps: []step{
			{conn: 1, req: rqAdd(initKey, 1), want: []output{out(1, rI(1))}},
			{conn: 1, req: rqSet("/b", "")},
			{conn: 1, req: rqSet("/a", "")},
			{conn: 1, req: rqPush("/q", "")},
			{conn: 1, req: rqBare(cmdListKeys), want: []output{out(1, rI(3), rS("/a"), rS("/b"), rS(initKey))}},
		}},
		{name: "barrier", steps: []step{
			{conn: 1, req: rqBarrier("/b", 2)},
			{conn: 2, req: rqBarrier("/b", 2), want: []output{out(1, rB(waitStop)), out(2, rB(waitStop))}},
			{conn: 3, req: rqBarrier("/b", 2), want: []output{out(3, rB(waitStop))}},
			{conn: 3, req: rqKey(cmdGet, "/b"), want: []output{out(3, rS("3"))}},
		}},
		{name: "barrier_cancel", steps: []step{
			{conn: 1, req: rqBarrier("/b", 2)},
			{conn: 1, req: rqBare(cmdCancelWait), want: []output{out(1, rB(waitCanceled))}},
			{conn: 2, req: rqBarrier("/b", 2), want: []output{out(2, rB(waitStop))}},
		}},
		{name: "barrier_non_numeric_drops", steps: []step{
			{conn: 1, req: rqSet("/b", "x")},
			{conn: 1, req: rqBarrier("/b", 2), wantErr: true},
		}},
		{name: "unknown_command", steps: []step{
			{conn: 1, req: rqBare(command(99)), wantErr: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServerState()
			for c := connID(1); c <= 3; c++ {
				s.connect(c)
				if tc.name != "validate_required" && tc.name != "validate_wrong_magic" {
					outs, err := s.handle(c, ptr(rqValidate()))
					require.NoError(t, err)
					require.Empty(t, outs)
				}
			}
			for i, st := range tc.steps {
				if st.disconnect {
					s.disconnect(st.conn)
					continue
				}
				got, err := s.handle(st.conn, ptr(st.req))
				if st.wantErr {
					require.Error(t, err, "step %d", i)
					assert.True(t, errorsIsOneOf(err, ErrProtocol, ErrInvalid), "step %d: %v", i, err)
					assert.Empty(t, got, "step %d", i)
					continue
				}
				require.NoError(t, err, "step %d", i)
				assert.Equal(t, tc.steps[i].want, got, "step %d (%v)", i, st.req.cmd)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func errorsIsOneOf(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
