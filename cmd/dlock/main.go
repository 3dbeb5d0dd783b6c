// Command dlock takes distributed locks from the command line; see
// 'dlock --help' and package cmd/dlock/internal/cli.
package main

import (
	"os"

	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
