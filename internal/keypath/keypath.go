// Package keypath maps a page's keys, arbitrary bytes, to file paths and
// back, one to one.
//
// A key is split at '/' into segments; each segment becomes one path
// component, so key "a/b/c" is file c in directory a/b. A segment that is a
// usable file name is shown as it is. Every other segment is escaped into a
// component that starts with "%%", a prefix no plain name may have:
//
//	segment                         component
//	plain name (most keys)          itself
//	"" (from "a//b", "/a", "a/")    "%%"
//	"." / ".."                      "%%." / "%%.."
//	".ledger" (first segment only)  "%%.ledger"
//	starts with "%%"                "%%%25%25..."
//	contains NUL                    "%%...%00..."
//
// Inside an escaped component '%' is written %25 and NUL %00, and a leading
// '+' or '=' as %2B or %3D. A segment too long for one component (over 255
// bytes once escaped) is cut into "%%+..." components, each a directory,
// followed by the component of its last part. A key that is a file while
// other keys continue it as a directory ("a" and "a/b") is shown, next to
// directory "a", as "%%=a".
//
// Decoding accepts only the canonical form: a path is valid when encoding
// its key gives the path back.
package keypath

import (
	"errors"
	"strings"
)

// MaxComponent is the longest path component (NAME_MAX).
const MaxComponent = 255

// Reserved is the name inside a page that is not a key.
const Reserved = ".ledger"

const (
	esc      = "%%"
	contMark = "%%+"
	collMark = "%%="
)

// ErrInvalid reports a path that is not the canonical form of any key.
var ErrInvalid = errors.New("keypath: not a canonical key path")

func plain(s string, first bool) bool {
	return s != "" && len(s) <= MaxComponent && s != "." && s != ".." &&
		!(first && s == Reserved) && !strings.HasPrefix(s, esc) &&
		!strings.ContainsRune(s, 0)
}

const hexDigits = "0123456789ABCDEF"

// escape percent-escapes '%' and NUL, and a leading '+' or '=' if lead.
func escape(b *strings.Builder, s string, lead bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == 0 || (lead && i == 0 && (c == '+' || c == '=')) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		} else {
			b.WriteByte(c)
		}
	}
}

func escLen(c byte) int {
	if c == '%' || c == 0 {
		return 3
	}
	return 1
}

// Segment returns the components of one key segment. first marks a key's
// first segment; coll asks for the collision form of its last component.
func Segment(s string, first, coll bool) []string {
	if !coll && plain(s, first) {
		return []string{s}
	}
	mark := esc
	if coll {
		mark = collMark
	}
	var comps []string
	// Cut continuation parts while the rest does not fit one component.
	for {
		n := len(mark)
		for i := 0; i < len(s); i++ {
			n += escLen(s[i])
			if i == 0 && !coll && (s[0] == '+' || s[0] == '=') {
				n += 2
			}
		}
		if n <= MaxComponent {
			break
		}
		var b strings.Builder
		b.WriteString(contMark)
		i := 0
		for i < len(s) && b.Len()+escLen(s[i]) <= MaxComponent {
			escape(&b, s[i:i+1], false)
			i++
		}
		comps = append(comps, b.String())
		s = s[i:]
		first = false
	}
	if !coll && plain(s, first) && len(comps) > 0 {
		return append(comps, s)
	}
	var b strings.Builder
	b.WriteString(mark)
	escape(&b, s, !coll)
	return append(comps, b.String())
}

// Path returns the components of key. coll asks for the collision form of
// the last component (the key is a file that is also a directory prefix).
func Path(key string, coll bool) []string {
	segs := strings.Split(key, "/")
	var out []string
	for i, s := range segs {
		out = append(out, Segment(s, i == 0, coll && i == len(segs)-1)...)
	}
	return out
}

func unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), true
}

// Key returns the key a path names and whether its last component is a
// collision form. The path must be canonical.
func Key(comps []string) (key string, coll bool, err error) {
	// Most paths are plain names, their own encoding: joined without the
	// encode-and-compare below, which cost 4 % of the mount's CPU in a
	// cp -a of many small files.
	simple := len(comps) > 0
	for i, c := range comps {
		if !plain(c, i == 0) || strings.IndexByte(c, '/') >= 0 {
			simple = false
			break
		}
	}
	if simple {
		return strings.Join(comps, "/"), false, nil
	}
	return decode(comps)
}

// decode is Key for any path: it decodes each component, then checks that
// the key's own encoding is the path.
func decode(comps []string) (key string, coll bool, err error) {
	if len(comps) == 0 {
		return "", false, ErrInvalid
	}
	var segs []string
	partial := ""
	inPart := false
	for i, c := range comps {
		last := i == len(comps)-1
		var part string
		var ok bool
		switch {
		case strings.HasPrefix(c, contMark):
			if last {
				return "", false, ErrInvalid
			}
			part, ok = unescape(c[len(contMark):])
			if !ok {
				return "", false, ErrInvalid
			}
			partial += part
			inPart = true
			continue
		case strings.HasPrefix(c, collMark):
			if !last {
				return "", false, ErrInvalid
			}
			part, ok = unescape(c[len(collMark):])
			coll = true
		case strings.HasPrefix(c, esc):
			part, ok = unescape(c[len(esc):])
		default:
			part, ok = c, true
		}
		if !ok {
			return "", false, ErrInvalid
		}
		segs = append(segs, partial+part)
		partial, inPart = "", false
	}
	if inPart {
		return "", false, ErrInvalid
	}
	key = strings.Join(segs, "/")
	// Canonical check: the key's own encoding must be this path.
	enc := Path(key, coll)
	if len(enc) != len(comps) {
		return "", false, ErrInvalid
	}
	for i := range enc {
		if enc[i] != comps[i] {
			return "", false, ErrInvalid
		}
	}
	return key, coll, nil
}

// Prefix returns the key prefix shared by every key under the directory at
// comps: the directory's key and a '/' (empty for the page root), or, under
// "%%+" components, the first part of a long segment.
func Prefix(comps []string) (string, error) {
	i := len(comps)
	for i > 0 && strings.HasPrefix(comps[i-1], contMark) {
		i--
	}
	base := ""
	if i > 0 {
		k, coll, err := Key(comps[:i])
		if err != nil || coll {
			return "", ErrInvalid
		}
		base = k + "/"
	}
	for _, c := range comps[i:] {
		part, ok := unescape(c[len(contMark):])
		if !ok {
			return "", ErrInvalid
		}
		base += part
	}
	return base, nil
}

// IsContinuation reports whether a component is part of a long segment.
func IsContinuation(comp string) bool { return strings.HasPrefix(comp, contMark) }
