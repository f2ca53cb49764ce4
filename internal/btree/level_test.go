package btree

import "testing"

// TestLevelMatchesLedger checks keys' levels against vectors computed apart
// from this package: SMHasher's MurmurHash3_x86_32 in C (seed 0xbeef) and
// Ledger's GetNodeLevel, which returns the index of the hash's first non-zero
// byte in memory order on a little-endian machine. The hashes are listed so
// that a wrong level can be told from a wrong hash.
func TestLevelMatchesLedger(t *testing.T) {
	for _, v := range []struct {
		key   string
		hash  uint32
		level uint8
	}{
		{"", 0x80967370, 0},
		{"a", 0x41521edf, 0},
		{"hello/world", 0xf1de3f42, 0},
		{"key388", 0x04245100, 1},
		{"key551", 0x1ad98700, 1},
		{"key126697", 0xf5f10000, 2},
		{"key175808", 0xb3180000, 2},
		// Zero high bytes do not raise a key: the rule reads the low end.
		{"key220", 0x000b7b2a, 0},
		{"key274", 0x002b20cd, 0},
	} {
		if got := Level(v.key); got != v.level {
			t.Errorf("Level(%q) = %d, want %d (MurmurHash3 %#08x)", v.key, got, v.level, v.hash)
		}
	}
	if got := levelOf(0); got != 255 {
		t.Errorf("level of a zero hash = %d, want 255", got)
	}
	if got := levelOf(0x01000000); got != 3 {
		t.Errorf("level of %#x = %d, want 3", 0x01000000, got)
	}
}
