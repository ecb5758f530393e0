package main

/*
#include "godist.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist"
)

// maxBytes bounds a single buffer (sanity check on lengths from C).
const maxBytes = 1 << 46

// bytesOf views a godist_buf as a Go slice over the caller's memory. The
// memory is C-allocated (torch's allocator), so Go may keep the slice for the
// duration of the operation; the caller keeps it alive until then.
func bytesOf(b *C.godist_buf, what string) ([]byte, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: %s: NULL buffer descriptor", libgodist.ErrInvalid, what)
	}
	return viewBytes(b.data, int64(b.nbytes), what)
}

// viewBytes is bytesOf for a pointer and a length.
func viewBytes(data unsafe.Pointer, n int64, what string) ([]byte, error) {
	if n < 0 || n > maxBytes {
		return nil, fmt.Errorf("%w: %s: invalid length %d", libgodist.ErrInvalid, what, n)
	}
	if n == 0 {
		return []byte{}, nil
	}
	if data == nil {
		return nil, fmt.Errorf("%w: %s: NULL data pointer with length %d", libgodist.ErrInvalid, what, n)
	}
	return unsafe.Slice((*byte)(data), int(n)), nil
}

// listOf views an array of n descriptors.
func listOf(p *C.godist_buf, n C.int32_t, what string) ([][]byte, error) {
	if n < 0 || n > 1<<20 {
		return nil, fmt.Errorf("%w: %s: invalid list length %d", libgodist.ErrInvalid, what, n)
	}
	if n == 0 {
		return nil, nil
	}
	if p == nil {
		return nil, fmt.Errorf("%w: %s: NULL list", libgodist.ErrInvalid, what)
	}
	descs := unsafe.Slice(p, int(n))
	out := make([][]byte, n)
	for i := range descs {
		b, err := bytesOf(&descs[i], fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func millis(ms C.int64_t) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

func unsafeSlice(p *C.uint64_t, n int) []C.uint64_t { return unsafe.Slice(p, n) }

// copyOut writes data into the caller's buf (capacity bytes) and its
// length into *outlen, or returns statusInvalid with the needed length in
// *outlen when it does not fit (what names the buffer in the message).
func copyOut(data []byte, what string, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) C.int {
	if outlen != nil {
		*outlen = C.int64_t(len(data))
	}
	if buf == nil || int64(capacity) < int64(len(data)) {
		return finish(fmt.Errorf("%w: %s buffer too small: %d bytes needed", libgodist.ErrInvalid, what, len(data)), errbuf, errlen)
	}
	copy(unsafe.Slice((*byte)(buf), len(data)), data)
	return statusOK
}

// putJSON is copyOut of v as JSON.
func putJSON(v any, what string, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) C.int {
	js, err := json.Marshal(v)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return copyOut(js, what, buf, capacity, outlen, errbuf, errlen)
}
