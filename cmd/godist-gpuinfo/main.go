// Command godist-gpuinfo prints, as one JSON object, what the NVIDIA driver
// says about this machine's GPUs: the driver, CUDA driver and NVML versions;
// each GPU's name, UUID, PCI bus id, memory, compute capability and NVLink
// links; and, for every pair of GPUs, their common ancestor in the PCI
// topology and whether they can reach each other peer-to-peer.
//
// It is a program of its own, not part of libgodist.so, because go-nvml
// leaves NVML's symbols to be resolved when libnvidia-ml.so.1 is opened:
// a shared library with those undefined symbols could not be loaded by
// ctypes on a host without the driver. Without the driver it prints
// {"available": false, "reason": "no NVIDIA driver: ...", ...} and exits
// 0; it exits 2 only for a usage error. `godist info` runs it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, newLibrary))
}

// run is the command with its arguments, output and NVML: its exit status.
func run(args []string, stdout, stderr io.Writer, lib func() Library) int {
	fs := flag.NewFlagSet("godist-gpuinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pretty := fs.Bool("pretty", false, "indent the JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: godist-gpuinfo [--pretty]\n\nPrints what the NVIDIA driver says about this machine's GPUs, as JSON.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "godist-gpuinfo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	enc := json.NewEncoder(stdout)
	if *pretty {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(Build(lib())); err != nil {
		fmt.Fprintf(stderr, "godist-gpuinfo: %v\n", err)
		return 1
	}
	return 0
}
