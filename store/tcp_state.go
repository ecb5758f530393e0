package store

import (
	"encoding/binary"
	"slices"
)

// connID names a connection inside serverState.
type connID uint64

// output is bytes the server must send on one connection. Outputs are
// produced in the order they must go on the wire.
type output struct {
	conn connID
	data []byte
}

// serverState is the TCPStore server as a state machine: requests in,
// bytes to send per connection out. It does no I/O and is not safe for
// concurrent use; the server calls it with its mutex held, and delivers the
// outputs to the connections' write queues before releasing it, so wake-ups
// and replies reach each connection in one total order (this is what makes
// CANCEL_WAIT atomic with respect to wake-ups).
//
// Behaviour follows torch's libuv server (reference §1.6–1.8) with two
// recommended changes: COMPARE_SET wakes waiters only when it stores, and
// QUEUE_PUSH wakes exactly one waiter.
type serverState struct {
	kv      map[string][]byte
	queues  map[string][][]byte
	waiters map[string][]connID // key -> connections waiting on it, one entry per occurrence
	conns   map[connID]*connWait
}

// connWait is the per-connection state.
type connWait struct {
	validated bool
	awaited   int      // keys still awaited by a pending WAIT/BARRIER; 0: none pending
	keys      []string // keys with waiter entries for this connection
}

func newServerState() *serverState {
	return &serverState{
		kv:      make(map[string][]byte),
		queues:  make(map[string][][]byte),
		waiters: make(map[string][]connID),
		conns:   make(map[connID]*connWait),
	}
}

// connect registers connection c.
func (s *serverState) connect(c connID) { s.conns[c] = &connWait{} }

// disconnect forgets connection c and its pending wait.
func (s *serverState) disconnect(c connID) {
	s.clearWait(c)
	delete(s.conns, c)
}

// handle applies one request from connection c and returns what to send,
// on c and on other connections it wakes. An error means c must be closed
// (bad or missing VALIDATE, a value ADD cannot parse, a WAIT while one is
// pending); nothing is sent then, as with torch's servers.
func (s *serverState) handle(c connID, req *request) ([]output, error) {
	cw := s.conns[c]
	if cw == nil {
		return nil, errf(ErrProtocol, "unknown connection %d", c)
	}
	if req.cmd == cmdValidate {
		if req.u32 != validationMagic {
			return nil, errf(ErrProtocol, "VALIDATE with wrong magic %#x", req.u32)
		}
		cw.validated = true
		return nil, nil
	}
	if !cw.validated {
		return nil, errf(ErrProtocol, "first message is %v, not VALIDATE", req.cmd)
	}
	var out []output
	reply := func(b []byte) { out = append(out, output{conn: c, data: b}) }
	switch req.cmd {
	case cmdPing:
		reply(binary.LittleEndian.AppendUint32(nil, req.u32))
	case cmdSet:
		out = s.set(out, req.keys[0], req.values[0])
	case cmdCompareSet:
		k := req.keys[0]
		cur, ok := s.kv[k]
		r, store := compareSetResult(cur, ok, req.values[0], req.values[1])
		if store {
			out = s.set(out, k, req.values[1])
		}
		reply(appendBytes(nil, r))
	case cmdGet:
		reply(appendBytes(nil, s.kv[req.keys[0]])) // missing: empty, like libuv
	case cmdAdd:
		k := req.keys[0]
		cur, ok := s.kv[k]
		n, err := addValue(cur, ok, req.num, false)
		if err != nil {
			return nil, err
		}
		out = s.set(out, k, []byte(formatInt(n)))
		reply(appendI64(nil, n))
	case cmdCheck:
		r := checkReady
		if !s.allPresent(req.keys) {
			r = checkNotReady
		}
		reply([]byte{r})
	case cmdWait:
		if cw.awaited > 0 {
			return nil, errf(ErrProtocol, "WAIT while another wait is pending")
		}
		if s.allPresent(req.keys) {
			reply([]byte{waitStop})
			break
		}
		// Some key is absent, so at least one waiter entry is added.
		for _, k := range req.keys {
			if _, ok := s.kv[k]; !ok {
				s.addWaiter(c, cw, k)
			}
		}
	case cmdGetNumKeys:
		reply(appendI64(nil, int64(len(s.kv))))
	case cmdDeleteKey:
		var n int64
		if _, ok := s.kv[req.keys[0]]; ok {
			n = 1
			delete(s.kv, req.keys[0])
		}
		reply(appendI64(nil, n))
	case cmdAppend:
		k := req.keys[0]
		out = s.set(out, k, append(s.kv[k], req.values[0]...))
	case cmdMultiGet:
		var b []byte
		for _, k := range req.keys {
			b = appendBytes(b, s.kv[k])
		}
		reply(b)
	case cmdMultiSet:
		for i, k := range req.keys {
			out = s.set(out, k, req.values[i])
		}
	case cmdCancelWait:
		s.clearWait(c)
		reply([]byte{waitCanceled})
	case cmdQueuePush:
		k := req.keys[0]
		s.queues[k] = append(s.queues[k], req.values[0])
		out = s.wakeOne(out, k)
	case cmdQueuePop:
		q := s.queues[req.keys[0]]
		b := appendI64(nil, int64(len(q)))
		if len(q) > 0 {
			b = appendBytes(b, q[0])
			q[0] = nil
			if len(q) == 1 {
				delete(s.queues, req.keys[0])
			} else {
				s.queues[req.keys[0]] = q[1:]
			}
		}
		reply(b)
	case cmdQueueLen:
		reply(appendI64(nil, int64(len(s.queues[req.keys[0]]))))
	case cmdListKeys:
		keys := make([]string, 0, len(s.kv))
		for k := range s.kv {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b := appendI64(nil, int64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
		}
		reply(b)
	case cmdBarrier:
		if cw.awaited > 0 {
			return nil, errf(ErrProtocol, "BARRIER while a wait is pending")
		}
		k := req.keys[0]
		cur, ok := s.kv[k]
		n, err := addValue(cur, ok, 1, false)
		if err != nil {
			return nil, err
		}
		s.kv[k] = []byte(formatInt(n))
		if n >= req.num {
			out = s.wake(out, k) // the others first, then the last arriver (libuv order)
			reply([]byte{waitStop})
		} else {
			s.addWaiter(c, cw, k)
		}
	default:
		return nil, errf(ErrProtocol, "unknown command %d", uint8(req.cmd))
	}
	return out, nil
}

// set stores a copy of v under k and wakes the waiters on k.
func (s *serverState) set(out []output, k string, v []byte) []output {
	s.kv[k] = v // v is owned by the state: decoded requests are not reused
	return s.wake(out, k)
}

// present reports whether k exists as a value or a non-empty queue.
func (s *serverState) present(k string) bool {
	if _, ok := s.kv[k]; ok {
		return true
	}
	return len(s.queues[k]) > 0
}

func (s *serverState) allPresent(keys []string) bool {
	for _, k := range keys {
		if !s.present(k) {
			return false
		}
	}
	return true
}

// addWaiter registers c as waiting on k once more.
func (s *serverState) addWaiter(c connID, cw *connWait, k string) {
	s.waiters[k] = append(s.waiters[k], c)
	cw.awaited++
	cw.keys = append(cw.keys, k)
}

// wake notifies every connection waiting on k; those whose last awaited
// key this was get STOP_WAITING.
func (s *serverState) wake(out []output, k string) []output {
	list, ok := s.waiters[k]
	if !ok {
		return out
	}
	delete(s.waiters, k)
	for _, c := range list {
		out = s.notify(out, c)
	}
	return out
}

// wakeOne notifies waiters on k in order until one of them completes
// (QUEUE_PUSH: one value, one consumer); the entries notified are removed.
func (s *serverState) wakeOne(out []output, k string) []output {
	list, ok := s.waiters[k]
	if !ok {
		return out
	}
	delete(s.waiters, k) // detached: clearWait cannot touch list while we walk it
	for i, c := range list {
		n := len(out)
		out = s.notify(out, c)
		if len(out) > n {
			rest := slices.DeleteFunc(list[i+1:], func(x connID) bool { return x == c })
			if len(rest) > 0 {
				s.waiters[k] = rest
			}
			return out
		}
	}
	return out
}

// notify counts one awaited key of c as arrived, replying STOP_WAITING when
// none is left.
func (s *serverState) notify(out []output, c connID) []output {
	cw := s.conns[c]
	if cw == nil || cw.awaited == 0 {
		return out
	}
	cw.awaited--
	if cw.awaited == 0 {
		s.clearWait(c)
		out = append(out, output{conn: c, data: []byte{waitStop}})
	}
	return out
}

// clearWait removes every waiter entry of c and resets its count.
func (s *serverState) clearWait(c connID) {
	cw := s.conns[c]
	if cw == nil {
		return
	}
	for _, k := range cw.keys {
		list, ok := s.waiters[k]
		if !ok {
			continue
		}
		list = slices.DeleteFunc(list, func(x connID) bool { return x == c })
		if len(list) == 0 {
			delete(s.waiters, k)
		} else {
			s.waiters[k] = list
		}
	}
	cw.keys = nil
	cw.awaited = 0
}

// numWaiting returns how many connections have a pending wait (for tests
// and introspection).
func (s *serverState) numWaiting() int {
	n := 0
	for _, cw := range s.conns {
		if cw.awaited > 0 {
			n++
		}
	}
	return n
}
