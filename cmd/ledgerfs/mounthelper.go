package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// commandLine returns the arguments of the command to run: this process's,
// or for a call as a mount helper the mount command it stands for.
func commandLine() []string {
	if args, ok := helperArgs(os.Args, calledByMountFuse()); ok {
		return args
	}
	return os.Args[1:]
}

// helperArgs returns the command line of mount -d for a call as a mount
// helper, and false for any other call. mount(8) runs /sbin/mount.ledgerfs
// (a link to this binary) for type ledgerfs in fstab as
//
//	mount.ledgerfs REPO MOUNTPOINT [-sfnv] [-N NS] [-t TYPE] [-o OPTIONS]
//
// and mount.fuse3 runs "ledgerfs REPO MOUNTPOINT -o OPTIONS" for type
// fuse.ledgerfs (byMountFuse). Both expect the command to return once the
// mount serves. Any other command line is one of ledgerfs's commands: two
// words that are not a command are a mistake (a typo, shell completion's
// "__complete"), never a mount.
func helperArgs(argv []string, byMountFuse bool) ([]string, bool) {
	if len(argv) < 3 {
		return nil, false
	}
	if filepath.Base(argv[0]) != "mount.ledgerfs" {
		if !byMountFuse || strings.HasPrefix(argv[1], "-") || isCommand(argv[1]) {
			return nil, false
		}
	}
	var pos, opts []string
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-o" && i+1 < len(argv):
			i++
			opts = append(opts, argv[i])
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, a[2:])
		case (a == "-N" || a == "-t") && i+1 < len(argv):
			i++ // a namespace or the type: nothing to do with them
		case a == "-f":
			os.Exit(0) // mount -f: everything but the mount itself
		case strings.HasPrefix(a, "-"):
			// -n (no mtab), -s (sloppy), -v (verbose)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, false
	}
	args := []string{"mount", "--daemon"}
	if len(opts) > 0 {
		args = append(args, "-o", strings.Join(opts, ","))
	}
	return append(args, pos...), true
}

// calledByMountFuse reports whether mount.fuse3 (or FUSE 2's mount.fuse)
// runs this process for a fuse.TYPE entry. It runs the command through
// "/bin/sh -c", as the shell's child or, if the shell execs it, directly;
// the shell runs with mount.fuse3's process id, so its parent is mount(8).
func calledByMountFuse() bool {
	parent := os.Getppid()
	switch comm(parent) {
	case "mount.fuse3", "mount.fuse":
		return true
	case "sh", "dash", "bash":
		switch comm(ppidOf(parent)) {
		case "mount", "mount.fuse3", "mount.fuse":
			return true
		}
	}
	return false
}

// comm is the command name of process pid, or "" if it cannot be read.
func comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ppidOf is the parent of process pid, or 0.
func ppidOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// isCommand reports whether name is one of ledgerfs's commands.
func isCommand(name string) bool {
	for _, c := range newRoot().Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return true
		}
	}
	return name == "help" || name == "completion"
}

// ignoredOptions are for mount(8), systemd or the kernel's own mount flags
// that a FUSE mount of this kind has or needs no say in.
var ignoredOptions = map[string]bool{
	"rw": true, "defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true,
	"users": true, "owner": true, "group": true, "nofail": true, "_netdev": true,
	"default_permissions": true, // always on
	"async":               true, "atime": true, "noatime": true, "relatime": true, "nodiratime": true,
	"exec": true, "noexec": true, "nodev": true, "nosuid": true,
}

// kernelOptions are passed to the kernel's mount: a FUSE mount is nodev
// and nosuid unless told.
var kernelOptions = map[string]bool{"dev": true, "suid": true}

// applyOptions sets the flags that mount options name, as mount(8) passes
// them (-o a,b=c): every flag's name with _ for -, and ro, allow_other and
// nonempty as FUSE filesystems spell them. It returns the options for the
// kernel.
func applyOptions(flags *pflag.FlagSet, options []string) ([]string, error) {
	var kernel []string
	for _, o := range options {
		k, v, hasValue := strings.Cut(strings.TrimSpace(o), "=")
		switch {
		case k == "":
			continue
		case ignoredOptions[k], strings.HasPrefix(k, "x-"), k == "comment":
			continue
		case kernelOptions[k]:
			kernel = append(kernel, k)
			continue
		case k == "ro":
			k = "read-only"
		case k == "nonempty":
			k = "allow-non-empty"
		}
		name := strings.ReplaceAll(k, "_", "-")
		f := flags.Lookup(name)
		if f == nil || name == "option" || name == "daemon" {
			return nil, fmt.Errorf("unknown mount option %q", o)
		}
		if !hasValue {
			if f.Value.Type() != "bool" {
				return nil, fmt.Errorf("mount option %q needs a value (%s=...)", k, k)
			}
			v = "true"
		}
		if err := flags.Set(name, v); err != nil {
			return nil, fmt.Errorf("mount option %q: %w", o, err)
		}
	}
	return kernel, nil
}
