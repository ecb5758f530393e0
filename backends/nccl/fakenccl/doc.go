// Package fakenccl tests backends/nccl and the engine's device path end to
// end without a GPU, against fake_nccl.c: a fake NCCL and CUDA runtime on
// host memory, built into a shared object by the tests and loaded by
// backends/nccl through nccl.Config (what GODIST_NCCL_LIBRARY and
// GODIST_CUDART_LIBRARY set in godist's library).
// Without cgo the package is only this file and its tests do not build.
package fakenccl
