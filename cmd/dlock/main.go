// Command dlock takes distributed locks from the command line; see
// 'dlock --help' and package internal/cli.
package main

import (
	"os"

	"github.com/dlockhq/dlock/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
