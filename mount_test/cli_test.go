package mount_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A command line that names no command is an error with cobra's
// suggestion and exit status 2: it creates nothing and mounts nothing,
// whatever its words (a typo of a command, shell completion's requests).
func TestCommandLineMistakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ledgerfs := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	nothingMade := func(what string) {
		t.Helper()
		if es, _ := os.ReadDir(dir); len(es) > 0 {
			t.Fatalf("%s made %s in the working directory", what, es[0].Name())
		}
	}

	out, code := ledgerfs("stas", "mnt")
	if code != 2 || !strings.Contains(out, `unknown command "stas"`) || !strings.Contains(out, "Did you mean this?\n\tstats") {
		t.Fatalf("ledgerfs stas mnt: exit %d, want 2 with a suggestion of stats:\n%s", code, out)
	}
	nothingMade("ledgerfs stas mnt")

	out, code = ledgerfs("mount", "--bogus", "r", "m")
	if code != 2 || !strings.Contains(out, "unknown flag: --bogus") {
		t.Fatalf("ledgerfs mount --bogus: exit %d, want 2:\n%s", code, out)
	}
	nothingMade("ledgerfs mount --bogus")

	// What bash's completion script asks at each TAB.
	out, code = ledgerfs("__complete", "m")
	if code != 0 || !strings.Contains(out, "mount\t") {
		t.Fatalf("ledgerfs __complete m: exit %d, want the mount command offered:\n%s", code, out)
	}
	nothingMade("ledgerfs __complete m")
	if out, code := ledgerfs("completion", "bash"); code != 0 || !strings.Contains(out, "__complete") {
		t.Fatalf("ledgerfs completion bash: exit %d:\n%.300s", code, out)
	}

	v1, code1 := ledgerfs("--version")
	v2, code2 := ledgerfs("version")
	if code1 != 0 || code2 != 0 || !strings.HasPrefix(v1, "ledgerfs version ") || v1 != v2 {
		t.Fatalf("--version (exit %d): %q; version (exit %d): %q", code1, v1, code2, v2)
	}
	nothingMade("ledgerfs version")
}
