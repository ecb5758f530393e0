package assemble

import (
	"errors"

	"github.com/godist/godist/backends/mpi"
	"github.com/godist/godist/backends/nccl"
	"github.com/godist/godist/backends/shm"
	"github.com/godist/godist/backends/tcp"
	"github.com/godist/godist/libgodist/reduce"
)

// What the library says about the backends outside a group: the checks of
// `python -m godist info` and MPI for the bootstrap of mpi:// (the Python
// rendezvous opens MPI, broadcasts the store's address from rank 0 and
// finalises MPI at exit). capi reaches the backends only through here.

// SharedMemory reports whether offload (the name a group's
// ProcessGroup.Offload returns) is the shared-memory arena of one host.
func SharedMemory(offload string) bool { return offload == (*shm.Arena)(nil).Name() }

// CheckShm reports whether a group created in this process could use
// shared memory in dir ("" for the default, /dev/shm), and if not, why.
func CheckShm(dir string) shm.Check { return shm.CheckDir(dir) }

// CheckTCP has the TCP fabric a group created with o gets describe a rank
// of a group of one, and reports its choice of addresses or why it could
// not listen.
func CheckTCP(o Options) tcp.Check {
	return tcp.CheckFabric(tcp.NetConfig{BindAddr: o.BindHost, Ifname: o.Ifname, PeerHost: o.PeerHost})
}

// CheckNCCL describes the NCCL this process can load.
func CheckNCCL() nccl.Info { return nccl.Describe() }

// OpenMPI loads the MPI shim (from dir, the package's mpi directory,
// unless GODIST_MPI_SHIM names one) after the MPI library it needs and
// initialises MPI once per process (mpi.Open), and describes it. Without
// MPI the error satisfies Unsupported.
func OpenMPI(dir string) (mpi.Info, error) {
	lib, err := mpi.Open(dir)
	if err != nil {
		return mpi.Info{}, err
	}
	return lib.Info(), nil
}

// errMPINotOpen is BcastMPI's error before OpenMPI; BadArgument reports
// it.
var errMPINotOpen = errors.New("MPI is not open (call godist_mpi_open first)")

// BcastMPI broadcasts b from root over MPI_COMM_WORLD, blocking. Before
// OpenMPI it fails with an error that BadArgument reports.
func BcastMPI(b []byte, root int) error {
	lib := mpi.Current()
	if lib == nil {
		return errMPINotOpen
	}
	return lib.Bcast(mpi.World, b, root)
}

// FinalizeMPI finalises MPI if godist initialised it (and has not
// finalised it yet); otherwise, or before OpenMPI, it does nothing.
func FinalizeMPI() error {
	if lib := mpi.Current(); lib != nil {
		return lib.Finalize()
	}
	return nil
}

// Unsupported reports whether err says a backend cannot be used in this
// process at all (no MPI to load or initialise).
func Unsupported(err error) bool { return errors.Is(err, mpi.ErrUnavailable) }

// BadArgument reports whether err is a backend refusing an argument (the
// MPI shim's GM_ERR_ARG) or a call made out of order (BcastMPI before
// OpenMPI).
func BadArgument(err error) bool {
	var e *mpi.Error
	return errors.As(err, &e) && e.Code == mpi.ErrArg || errors.Is(err, errMPINotOpen)
}

// Libraries names the native libraries the backends load, in the order
// they are tried (after the GODIST_*_LIBRARY settings).
type Libraries struct {
	NCCL, CUDART []string
	MPIImpls     []string            // the MPI implementations with a shim, in the order tried
	MPI          map[string][]string // each implementation's MPI library sonames
}

// LibraryNames returns the backends' library search lists.
func LibraryNames() Libraries {
	return Libraries{NCCL: nccl.NCCLNames, CUDART: nccl.CUDARTNames, MPIImpls: mpi.Impls, MPI: mpi.MPILibraries}
}

// NCCLRules returns the reduce ops the NCCL path applies to each dtype it
// reduces, and those a complex tensor may be reduced with (nccl.Rules).
func NCCLRules() (ops map[reduce.DType][]reduce.Op, complexOps []reduce.Op) { return nccl.Rules() }
