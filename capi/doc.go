// Command capi is the C ABI of godist, built with
//
//	go build -buildmode=c-shared -o libgodist.so ./capi
//
// which also writes libgodist.h. Every exported function:
//
//   - returns a status code (see errors.go; 0 means success),
//   - takes a caller-owned error buffer (char *err, int32_t errlen), as its
//     last two arguments or in its godist_op, and on failure fills it in
//     (godist_error, then the message; godist.h),
//   - recovers any panic into statusInternal, so no Go panic ever crosses
//     into C,
//   - refers to Go objects by uint64 handles from the table in handles.go;
//     a stale or bogus handle is statusInvalid, never a crash.
//
// Each op (all_reduce, send, ...) has one entry point, taking a godist_op
// (ops.go); works are waited for and collected in work.go. The package
// holds no logic: it converts C arguments, calls libgodist, store or
// assemble (the only way to the backends), and converts the result back.
// assemble/layers_test.go checks its imports and that it decides nothing
// by a name.
package main

func main() {}
