package main

import (
	"slices"
	"strings"
	"testing"
)

// mount(8) and mount.fuse3 call the binary as a helper; everything else is
// a command line of its own.
func TestHelperArgs(t *testing.T) {
	for _, c := range []struct {
		argv        []string
		byMountFuse bool
		want        string // "" for no helper call
	}{
		{[]string{"/sbin/mount.ledgerfs", "/srv/r", "/mnt/l", "-o", "rw,allow_other"}, false, "mount --daemon -o rw,allow_other /srv/r /mnt/l"},
		{[]string{"/sbin/mount.ledgerfs", "/srv/r", "/mnt/l", "-n", "-s", "-v", "-t", "ledgerfs", "-orw"}, false, "mount --daemon -o rw /srv/r /mnt/l"},
		{[]string{"/sbin/mount.ledgerfs", "/srv/r", "/mnt/l"}, false, "mount --daemon /srv/r /mnt/l"},
		{[]string{"ledgerfs", "/srv/r", "/mnt/l", "-o", "ro"}, true, "mount --daemon -o ro /srv/r /mnt/l"},
		// The same words typed in a shell are a mistake, not a mount.
		{[]string{"ledgerfs", "/srv/r", "/mnt/l", "-o", "ro"}, false, ""},
		{[]string{"ledgerfs", "stas", "/tmp/x"}, false, ""},
		{[]string{"ledgerfs", "__complete", "m"}, false, ""},
		{[]string{"ledgerfs", "stats", "/mnt/l"}, true, ""},
		{[]string{"ledgerfs", "mount", "/srv/r", "/mnt/l"}, false, ""},
		{[]string{"ledgerfs", "log", "/srv/r", "l", "p"}, false, ""},
		{[]string{"ledgerfs", "--debug", "mount", "/mnt/l"}, false, ""},
		{[]string{"/sbin/mount.ledgerfs", "/srv/r"}, false, ""},
	} {
		args, ok := helperArgs(c.argv, c.byMountFuse)
		if got := strings.Join(args, " "); ok != (c.want != "") || got != c.want {
			t.Errorf("%q: %q %v, want %q", c.argv, got, ok, c.want)
		}
	}
}

// Mount options set the mount command's flags; mount(8)'s own are
// ignored, dev and suid go to the kernel, anything else is an error.
func TestApplyOptions(t *testing.T) {
	cmd := newMount()
	kernel, err := applyOptions(cmd.Flags(), []string{"ro", "allow_other", "cache_timeout=2.5", "uid=1000", "nonempty",
		"_netdev", "x-systemd.automount", "nofail", "defaults", "default_permissions", "dev", "log_file=/tmp/l"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kernel, []string{"dev"}) {
		t.Errorf("kernel options %v, want [dev]", kernel)
	}
	for name, want := range map[string]string{"read-only": "true", "allow-other": "true", "cache-timeout": "2.5", "uid": "1000",
		"allow-non-empty": "true", "log-file": "/tmp/l"} {
		if got := cmd.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
	for _, bad := range []string{"cache_timeuot=1", "uid", "daemon", "option=x", "max_idle_pages=many"} {
		if _, err := applyOptions(newMount().Flags(), []string{bad}); err == nil {
			t.Errorf("option %q accepted", bad)
		}
	}
}
