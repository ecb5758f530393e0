package main

/*
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/godist/godist/auth"
)

// godist_set_secret sets the job secret (GODIST_SECRET) that later
// listeners, store servers and store clients authenticate with; n == 0
// means none. Python passes its os.environ's value before it creates
// each of them, since Go reads the environment only once, at load.
//
//export godist_set_secret
func godist_set_secret(secret *C.char, n C.int64_t) {
	if secret == nil || n <= 0 {
		auth.SetSecret(nil)
		return
	}
	auth.SetSecret(C.GoBytes(unsafe.Pointer(secret), C.int(n)))
}
