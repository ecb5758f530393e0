package main

import (
	"os"

	"github.com/godist/godist/assemble"
)

// The settings of the environment reach the backends here, once, when the
// library loads (Go sees only the environment the process started with;
// Python passes what it changes later through the init calls).
func init() { assemble.Configure(os.Getenv) }
