// Command veil is the command-line entry point of Veil, a privacy-preserving
// face recognition and face-tagging system. It only builds the command tree;
// every command lives in cmd/veil/cli.
package main

import (
	"os"

	"github.com/veil-privacy/veil/cmd/veil/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
