package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// TCPStore wire protocol (torch 2.11–2.15; reference §1). Every message is
// a 1-byte command followed by its fields, little-endian: strings and values
// are a u64 length plus bytes, integers are i64, the VALIDATE magic and PING
// nonce are u32. There is no message length and no request id: replies come
// back in request order, and VALIDATE, SET, APPEND, MULTI_SET and QUEUE_PUSH
// have no reply.

// command is a TCPStore query type.
type command uint8

// Query types, as numbered by torch ≥ 2.2.
const (
	cmdValidate   command = 0  // u32 magic                     -> (none)
	cmdSet        command = 1  // S key, S value                -> (none)
	cmdCompareSet command = 2  // S key, S expected, S desired  -> S value
	cmdGet        command = 3  // S key                         -> S value
	cmdAdd        command = 4  // S key, I delta                -> I value
	cmdCheck      command = 5  // U n, n×S key                  -> B ready(0)/not ready(1)
	cmdWait       command = 6  // U n, n×S key                  -> B stop waiting(0), maybe later
	cmdGetNumKeys command = 7  // -                             -> I count
	cmdDeleteKey  command = 8  // S key                         -> I deleted
	cmdAppend     command = 9  // S key, S value                -> (none)
	cmdMultiGet   command = 10 // U n, n×S key                  -> n×S value
	cmdMultiSet   command = 11 // U n, n×(S key, S value)       -> (none)
	cmdCancelWait command = 12 // -                             -> B wait canceled(1)
	cmdPing       command = 13 // u32 nonce                     -> u32 nonce
	cmdQueuePush  command = 14 // S key, S value                -> (none)
	cmdQueuePop   command = 15 // S key                         -> I len before; if > 0, S value
	cmdQueueLen   command = 16 // S key                         -> I len
	cmdListKeys   command = 17 // -                             -> I n, n×S key
	cmdBarrier    command = 18 // S key, I world size           -> B stop waiting(0), maybe later
	numCommands           = 19
)

var commandNames = [numCommands]string{
	"VALIDATE", "SET", "COMPARE_SET", "GET", "ADD", "CHECK", "WAIT", "GETNUMKEYS",
	"DELETE_KEY", "APPEND", "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
	"QUEUE_PUSH", "QUEUE_POP", "QUEUE_LEN", "LIST_KEYS", "BARRIER",
}

func (c command) String() string {
	if int(c) < numCommands {
		return commandNames[c]
	}
	return fmt.Sprintf("command(%d)", uint8(c))
}

// validationMagic is the u32 a client sends with VALIDATE.
const validationMagic uint32 = 0x3C85F7CE

// One-byte replies.
const (
	checkReady    byte = 0
	checkNotReady byte = 1
	waitStop      byte = 0 // STOP_WAITING (WAIT, BARRIER)
	waitCanceled  byte = 1 // WAIT_CANCELED (CANCEL_WAIT)
)

// initKey is the key every TCPStore client with a known world size adds 1
// to after connecting (it has no "/" prefix).
const initKey = "init/"

// keyPrefix is prepended to every user key on the wire.
const keyPrefix = "/"

// limits bounds what a decoder accepts; exceeding any limit is a protocol
// error. The defaults are the libuv server's.
type limits struct {
	maxKeyLen   int   // bytes per key (torch libuv: 8 KiB)
	maxValueLen int   // bytes per value (torch libuv: 8 MiB)
	maxKeys     int   // keys per CHECK/WAIT/MULTI_GET/MULTI_SET (torch libuv: 128 Ki)
	maxRequest  int64 // bytes per whole request
}

var defaultLimits = limits{
	maxKeyLen:   8 << 10,
	maxValueLen: 8 << 20,
	maxKeys:     128 << 10,
	maxRequest:  64 << 20,
}

// request is one decoded TCPStore request.
type request struct {
	cmd    command
	keys   []string // the key(s), in wire order
	values [][]byte // SET/APPEND/QUEUE_PUSH: [value]; COMPARE_SET: [expected, desired]; MULTI_SET: one per key
	num    int64    // ADD delta, BARRIER world size
	u32    uint32   // VALIDATE magic, PING nonce
}

// errTruncated is wrapped when a message ends before its last field.
var errTruncated = errf(ErrProtocol, "truncated message")

// decoder reads protocol fields from a buffered stream. It counts bytes to
// enforce maxRequest.
type decoder struct {
	r      *bufio.Reader
	lim    limits
	total  int64
	rawEOF bool // client: keep io.EOF (the server hung up) instead of errTruncated
	buf    [8]byte
}

// newDecoder returns a request decoder: an EOF inside a message is a
// protocol error (errTruncated).
func newDecoder(r *bufio.Reader, lim limits) *decoder { return &decoder{r: r, lim: lim} }

// newReplyDecoder returns a reply decoder: an EOF means the server closed
// the connection and is returned as is.
func newReplyDecoder(r *bufio.Reader) *decoder {
	return &decoder{r: r, lim: replyLimits, rawEOF: true}
}

// fixed reads n ≤ 8 bytes into d.buf.
func (d *decoder) fixed(n int) ([]byte, error) {
	d.total += int64(n)
	if _, err := io.ReadFull(d.r, d.buf[:n]); err != nil {
		return nil, d.truncated(err)
	}
	return d.buf[:n], nil
}

// truncated maps an EOF in the middle of a message to errTruncated.
func (d *decoder) truncated(err error) error {
	if !d.rawEOF && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return errTruncated
	}
	return err
}

func (d *decoder) u8() (byte, error) {
	b, err := d.fixed(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.fixed(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.fixed(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (d *decoder) i64() (int64, error) {
	n, err := d.u64()
	return int64(n), err
}

// bytes reads a u64 length and that many bytes, at most max.
func (d *decoder) bytes(max int, what string) ([]byte, error) {
	n, err := d.u64()
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, errf(ErrProtocol, "%s of %d bytes exceeds the limit of %d", what, n, max)
	}
	d.total += int64(n)
	if d.lim.maxRequest > 0 && d.total > d.lim.maxRequest {
		return nil, errf(ErrProtocol, "request exceeds the limit of %d bytes", d.lim.maxRequest)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		return nil, d.truncated(err)
	}
	return b, nil
}

func (d *decoder) key() (string, error) {
	b, err := d.bytes(d.lim.maxKeyLen, "key")
	return string(b), err
}

func (d *decoder) value() ([]byte, error) { return d.bytes(d.lim.maxValueLen, "value") }

// count reads a u64 number of keys, at most maxKeys.
func (d *decoder) count() (int, error) {
	n, err := d.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(d.lim.maxKeys) {
		return 0, errf(ErrProtocol, "%d keys exceed the limit of %d", n, d.lim.maxKeys)
	}
	return int(n), nil
}

// readRequest reads one whole request. It returns io.EOF if the stream ends
// cleanly before a message, and an error wrapping ErrProtocol for a
// truncated, oversized or unknown request (after which the stream is
// unusable).
func readRequest(r *bufio.Reader, lim limits) (request, error) {
	d := newDecoder(r, lim)
	c, err := r.ReadByte()
	if err != nil {
		return request{}, err // io.EOF at a message boundary
	}
	d.total = 1
	req := request{cmd: command(c)}
	err = d.body(&req)
	return req, err
}

// body reads the fields of req.cmd into req.
func (d *decoder) body(req *request) error {
	var err error
	keyAndValues := func(nvalues int) error {
		k, err := d.key()
		if err != nil {
			return err
		}
		req.keys = []string{k}
		for range nvalues {
			v, err := d.value()
			if err != nil {
				return err
			}
			req.values = append(req.values, v)
		}
		return nil
	}
	switch req.cmd {
	case cmdValidate, cmdPing:
		req.u32, err = d.u32()
	case cmdSet, cmdAppend, cmdQueuePush:
		err = keyAndValues(1)
	case cmdCompareSet:
		err = keyAndValues(2)
	case cmdGet, cmdDeleteKey, cmdQueuePop, cmdQueueLen:
		err = keyAndValues(0)
	case cmdAdd, cmdBarrier:
		if err = keyAndValues(0); err == nil {
			req.num, err = d.i64()
		}
	case cmdCheck, cmdWait, cmdMultiGet, cmdMultiSet:
		var n int
		if n, err = d.count(); err != nil {
			return err
		}
		req.keys = make([]string, 0, min(n, 1024))
		for range n {
			k, err := d.key()
			if err != nil {
				return err
			}
			req.keys = append(req.keys, k)
			if req.cmd == cmdMultiSet {
				v, err := d.value()
				if err != nil {
					return err
				}
				req.values = append(req.values, v)
			}
		}
	case cmdGetNumKeys, cmdCancelWait, cmdListKeys:
	default:
		err = errf(ErrProtocol, "unknown command %d", uint8(req.cmd))
	}
	return err
}

// appendRequest appends the wire encoding of req to b.
func appendRequest(b []byte, req request) []byte {
	b = append(b, byte(req.cmd))
	switch req.cmd {
	case cmdValidate, cmdPing:
		b = binary.LittleEndian.AppendUint32(b, req.u32)
	case cmdSet, cmdAppend, cmdQueuePush, cmdCompareSet, cmdGet, cmdDeleteKey, cmdQueuePop, cmdQueueLen:
		b = appendString(b, req.keys[0])
		for _, v := range req.values {
			b = appendBytes(b, v)
		}
	case cmdAdd, cmdBarrier:
		b = appendString(b, req.keys[0])
		b = appendI64(b, req.num)
	case cmdCheck, cmdWait, cmdMultiGet, cmdMultiSet:
		b = binary.LittleEndian.AppendUint64(b, uint64(len(req.keys)))
		for i, k := range req.keys {
			b = appendString(b, k)
			if req.cmd == cmdMultiSet {
				b = appendBytes(b, req.values[i])
			}
		}
	}
	return b
}

// appendString appends a u64 length and s.
func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendBytes appends a u64 length and v.
func appendBytes(b []byte, v []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(v)))
	return append(b, v...)
}

// appendI64 appends n as 8 little-endian bytes.
func appendI64(b []byte, n int64) []byte {
	return binary.LittleEndian.AppendUint64(b, uint64(n))
}
