package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version describes the build: the module's version and the VCS revision
// it was built from, as the Go toolchain recorded them.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, when string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" && (bi.Main.Version == "" || bi.Main.Version == "(devel)") {
		// The toolchain records none outside a git checkout, or with
		// -buildvcs=false (which GOFLAGS may set): say so, rather than
		// leave "(devel)" to be read as the revision.
		v += ", no revision recorded (built outside a git checkout, or with -buildvcs=false)"
	}
	if rev != "" {
		v += ", revision " + rev
		if dirty {
			v += " with local changes"
		}
		if when != "" {
			v += " of " + when
		}
	}
	return v + ", " + bi.GoVersion
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the revision ledgerfs was built from",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "ledgerfs version", version())
		},
	}
}
