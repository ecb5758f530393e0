package assemble

import (
	"github.com/godist/godist/auth"
	"github.com/godist/godist/backends/mpi"
	"github.com/godist/godist/backends/nccl"
)

// Configure hands the backends the settings of godist's environment
// variables, read through getenv: capi calls it once, when the library
// loads, with the environment the process started with (all Go ever
// sees). The backends read no environment of their own: NCCL's libraries
// (GODIST_NCCL_LIBRARY, GODIST_CUDART_LIBRARY), the secret (GODIST_SECRET)
// and where MPI is (GODIST_MPI, GODIST_MPI_SHIM, GODIST_MPI_LIBRARY and
// the launcher whose variables are set: mpi.ConfigFromEnv) come from here.
func Configure(getenv func(string) string) {
	nccl.Configure(nccl.Config{NCCLLibrary: getenv("GODIST_NCCL_LIBRARY"),
		CUDARTLibrary: getenv("GODIST_CUDART_LIBRARY")})
	mpi.Configure(mpi.ConfigFromEnv(getenv))
	auth.SetSecret([]byte(getenv(auth.Env)))
}
