package btree

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
)

// Extended attributes are kept in Meta.Xattrs as one string, so that Meta
// stays comparable: the attributes sorted by name, each as its name's
// length (uvarint), the name, its value's length (uvarint), the value.
// Stored, they are EntryMetaStorage's xattrs vector.

// Xattr is one extended attribute.
type Xattr struct {
	Name, Value string
}

// ErrXattrs is the error of Meta.Xattrs that do not parse.
var ErrXattrs = errors.New("btree: malformed extended attributes")

// XattrList returns m's extended attributes, sorted by name.
func (m Meta) XattrList() ([]Xattr, error) {
	var out []Xattr
	s := m.Xattrs
	for s != "" {
		name, rest, ok := field(s)
		if !ok {
			return nil, ErrXattrs
		}
		value, rest, ok := field(rest)
		if !ok {
			return nil, ErrXattrs
		}
		out = append(out, Xattr{name, value})
		s = rest
	}
	return out, nil
}

// Xattr returns the value of m's attribute name.
func (m Meta) Xattr(name string) (string, bool) {
	_, v, _, ok := m.findXattr(name)
	return v, ok
}

// findXattr finds attribute name in the encoding without decoding the
// others: the span [start, end) of its record, and its value.
func (m Meta) findXattr(name string) (start int, value string, end int, ok bool) {
	s := m.Xattrs
	for pos := 0; pos < len(s); {
		n, rest, ok1 := field(s[pos:])
		v, rest, ok2 := field(rest)
		if !ok1 || !ok2 {
			return 0, "", 0, false
		}
		next := len(s) - len(rest)
		switch {
		case n == name:
			return pos, v, next, true
		case n > name:
			return 0, "", 0, false // sorted: it is not further on
		}
		pos = next
	}
	return 0, "", 0, false
}

// SetXattrs makes xs m's extended attributes; names must be unique.
func (m *Meta) SetXattrs(xs []Xattr) {
	xs = slices.Clone(xs)
	slices.SortFunc(xs, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
	var b []byte
	for _, x := range xs {
		b = binary.AppendUvarint(b, uint64(len(x.Name)))
		b = append(b, x.Name...)
		b = binary.AppendUvarint(b, uint64(len(x.Value)))
		b = append(b, x.Value...)
	}
	m.Xattrs = string(b)
}

// SetXattr sets attribute name to value, replacing any: the other
// records are copied as they are, in place.
func (m *Meta) SetXattr(name, value string) error {
	if err := m.checkXattrs(); err != nil {
		return err
	}
	var rec []byte
	rec = binary.AppendUvarint(rec, uint64(len(name)))
	rec = append(rec, name...)
	rec = binary.AppendUvarint(rec, uint64(len(value)))
	rec = append(rec, value...)
	s := m.Xattrs
	if start, _, end, ok := m.findXattr(name); ok {
		m.Xattrs = s[:start] + string(rec) + s[end:]
		return nil
	}
	// Where it goes in name order.
	pos := 0
	for pos < len(s) {
		n, rest, _ := field(s[pos:])
		if n > name {
			break
		}
		_, rest, _ = field(rest)
		pos = len(s) - len(rest)
	}
	m.Xattrs = s[:pos] + string(rec) + s[pos:]
	return nil
}

// RemoveXattr removes attribute name and reports whether it was there.
func (m *Meta) RemoveXattr(name string) (bool, error) {
	if err := m.checkXattrs(); err != nil {
		return false, err
	}
	start, _, end, ok := m.findXattr(name)
	if !ok {
		return false, nil
	}
	m.Xattrs = m.Xattrs[:start] + m.Xattrs[end:]
	return true, nil
}

// checkXattrs checks that m.Xattrs parses, without copying it.
func (m Meta) checkXattrs() error {
	for s := m.Xattrs; s != ""; {
		_, rest, ok1 := field(s)
		_, rest, ok2 := field(rest)
		if !ok1 || !ok2 {
			return ErrXattrs
		}
		s = rest
	}
	return nil
}

// field splits a length-prefixed string off the front of s.
func field(s string) (string, string, bool) {
	n, k := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
	if k <= 0 || n > uint64(len(s)-k) {
		return "", "", false
	}
	return s[k : k+int(n)], s[k+int(n):], true
}
