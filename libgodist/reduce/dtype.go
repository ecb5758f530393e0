package reduce

import (
	"errors"
	"fmt"
	"strconv"
)

// DType identifies the element type of a tensor buffer. The values are part
// of the wire format and the C ABI; never renumber them.
type DType uint8

// Element types. The names match torch's dtype names (see DType.String).
const (
	Float16    DType = 0
	BFloat16   DType = 1
	Float32    DType = 2
	Float64    DType = 3
	Complex64  DType = 4
	Complex128 DType = 5
	Int8       DType = 6
	Uint8      DType = 7
	Int16      DType = 8
	Int32      DType = 9
	Int64      DType = 10
	Bool       DType = 11

	numDTypes = 12
)

// dtypeInfo is the static description of one DType.
type dtypeInfo struct {
	name string
	size int
	kind kind
}

type kind uint8

const (
	kindFloat   kind = iota + 1 // float16, bfloat16, float32, float64
	kindComplex                 // complex64, complex128
	kindInt                     // int8, uint8, int16, int32, int64
	kindBool                    // bool
)

var dtypes = [numDTypes]dtypeInfo{
	Float16:    {"float16", 2, kindFloat},
	BFloat16:   {"bfloat16", 2, kindFloat},
	Float32:    {"float32", 4, kindFloat},
	Float64:    {"float64", 8, kindFloat},
	Complex64:  {"complex64", 8, kindComplex},
	Complex128: {"complex128", 16, kindComplex},
	Int8:       {"int8", 1, kindInt},
	Uint8:      {"uint8", 1, kindInt},
	Int16:      {"int16", 2, kindInt},
	Int32:      {"int32", 4, kindInt},
	Int64:      {"int64", 8, kindInt},
	Bool:       {"bool", 1, kindBool},
}

// Valid reports whether d is one of the defined dtypes.
func (d DType) Valid() bool { return d < numDTypes }

// Size returns the number of bytes per element, or 0 for an unknown dtype.
func (d DType) Size() int {
	if d >= numDTypes {
		return 0
	}
	return dtypes[d].size
}

// String returns torch's name for d ("float32", "bfloat16", ...), or
// "dtype(N)" for an unknown value.
func (d DType) String() string {
	if d >= numDTypes {
		return "dtype(" + strconv.Itoa(int(d)) + ")"
	}
	return dtypes[d].name
}

func (d DType) kind() kind {
	if d >= numDTypes {
		return 0
	}
	return dtypes[d].kind
}

// Op is a reduction operator. The values equal torch's
// torch.distributed.ReduceOp.RedOpType.
type Op uint8

// Reduction operators.
const (
	Sum       Op = 0
	Avg       Op = 1
	Product   Op = 2
	Min       Op = 3
	Max       Op = 4
	BAnd      Op = 5
	BOr       Op = 6
	BXor      Op = 7
	PremulSum Op = 8

	numOps = 9
)

var opNames = [numOps]string{
	Sum:       "SUM",
	Avg:       "AVG",
	Product:   "PRODUCT",
	Min:       "MIN",
	Max:       "MAX",
	BAnd:      "BAND",
	BOr:       "BOR",
	BXor:      "BXOR",
	PremulSum: "PREMUL_SUM",
}

// Valid reports whether o is one of the defined operators.
func (o Op) Valid() bool { return o < numOps }

// String returns torch's name for o ("SUM", "PREMUL_SUM", ...), or "op(N)"
// for an unknown value.
func (o Op) String() string {
	if o >= numOps {
		return "op(" + strconv.Itoa(int(o)) + ")"
	}
	return opNames[o]
}

// ErrUnsupported is wrapped by every error that reports an operator, dtype or
// combination of the two that is not defined.
var ErrUnsupported = errors.New("reduce: unsupported")

// unsupportedError is an error whose message is msg and which wraps
// ErrUnsupported.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }
func (e *unsupportedError) Unwrap() error { return ErrUnsupported }

func unsupportedf(format string, args ...any) error {
	return &unsupportedError{msg: fmt.Sprintf(format, args...)}
}

// allowed reports whether op is defined for dt (both must be valid). This is
// the single source of truth for the semantics table in doc.go; the kernel
// table and the Check errors are derived from it.
func allowed(op Op, dt DType) bool {
	switch dt.kind() {
	case kindInt:
		return op != PremulSum
	case kindBool:
		return op != Avg && op != PremulSum
	case kindFloat:
		return op != BAnd && op != BOr && op != BXor
	case kindComplex:
		return op == Sum || op == Avg || op == PremulSum || op == Product
	}
	return false
}

// checkErrs holds the prebuilt error of every unsupported (op, dtype) pair so
// Check never allocates.
var checkErrs = func() (t [numOps][numDTypes]error) {
	for op := Op(0); op < numOps; op++ {
		for dt := DType(0); dt < numDTypes; dt++ {
			if allowed(op, dt) {
				continue
			}
			msg := fmt.Sprintf("reduce: %s is not defined for %s tensors", op, dt)
			switch {
			case (op == BAnd || op == BOr || op == BXor) && (dt.kind() == kindFloat || dt.kind() == kindComplex):
				msg += " (use an integer or bool dtype)"
			case op == PremulSum:
				msg += " (use a floating-point or complex dtype)"
			}
			t[op][dt] = &unsupportedError{msg: msg}
		}
	}
	return t
}()

// Check reports whether op is defined for dt. The error wraps ErrUnsupported
// and reads like "reduce: MAX is not defined for complex64 tensors".
func Check(op Op, dt DType) error {
	if op >= numOps {
		return unsupportedf("reduce: unknown reduce op %d", uint8(op))
	}
	if dt >= numDTypes {
		return unsupportedf("reduce: unknown dtype %d", uint8(dt))
	}
	return checkErrs[op][dt]
}
