package assemble

import (
	"github.com/godist/godist/auth"
	"github.com/godist/godist/backends/nccl"
)

// Configure hands the backends the settings of godist's environment
// variables, read through getenv: capi calls it once, when the library
// loads, with the environment the process started with (all Go ever
// sees). The backends read no environment of their own. The MPI path
// still does (backends/mpi: GODIST_MPI, GODIST_MPI_SHIM,
// GODIST_MPI_LIBRARY and the launchers' variables).
func Configure(getenv func(string) string) {
	nccl.Configure(nccl.Config{NCCLLibrary: getenv("GODIST_NCCL_LIBRARY"),
		CUDARTLibrary: getenv("GODIST_CUDART_LIBRARY")})
	auth.SetSecret([]byte(getenv(auth.Env)))
}
