// Command gendocs writes p2pctl's man pages and bash completion from its
// cobra command tree, for the Debian package:
//
//	gendocs MANDIR BASH_COMPLETION_FILE
//
// The pages' date is $SOURCE_DATE_EPOCH when set (cobra/doc reads it), so
// that a package built twice from one revision is the same.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra/doc"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/cli"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gendocs MANDIR BASH_COMPLETION_FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

func run(manDir, bashFile string) error {
	root := cli.Command()
	root.DisableAutoGenTag = true
	if err := os.MkdirAll(manDir, 0o755); err != nil {
		return err
	}
	hdr := &doc.GenManHeader{Title: "P2PCTL", Section: "1", Source: "gpufpga", Manual: "gpufpga manual"}
	if err := doc.GenManTree(root, hdr, manDir); err != nil {
		return err
	}
	f, err := os.Create(bashFile)
	if err != nil {
		return err
	}
	if err := root.GenBashCompletionV2(f, true); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
