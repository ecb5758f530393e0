// Command capi is the C ABI of godist, built with
//
//	go build -buildmode=c-shared -o libgodist.so ./capi
//
// which also writes libgodist.h. Every exported function:
//
//   - returns a status code (see errors.go; 0 means success),
//   - takes a caller-owned error buffer (char *err, int32_t errlen) as its
//     last two arguments and writes a NUL-terminated message there on failure,
//   - recovers any panic into statusInternal, so no Go panic ever crosses
//     into C,
//   - refers to Go objects by uint64 handles from the table in handles.go;
//     a stale or bogus handle is statusInvalid, never a crash.
//
// The package holds no logic: it converts C arguments, calls libgodist or
// store, and converts the result back.
package main

func main() {}
