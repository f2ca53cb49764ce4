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
	err := records(m.Xattrs, func(name, value string, _, _ int) bool {
		out = append(out, Xattr{name, value})
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Xattr returns the value of m's attribute name.
func (m Meta) Xattr(name string) (string, bool) {
	_, v, _, ok := m.findXattr(name)
	return v, ok
}

// findXattr finds attribute name in the encoding without decoding the
// others: the span [start, end) of its record, and its value; else, in
// start, where a record of name would go.
func (m Meta) findXattr(name string) (start int, value string, end int, ok bool) {
	start = len(m.Xattrs)
	records(m.Xattrs, func(n, v string, s, e int) bool {
		if n >= name { // sorted: it is here or nowhere
			start, value, end, ok = s, v, e, n == name
			return false
		}
		return true
	})
	return start, value, end, ok
}

// SetXattrs makes xs m's extended attributes; names must be unique.
func (m *Meta) SetXattrs(xs []Xattr) {
	xs = slices.Clone(xs)
	slices.SortFunc(xs, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
	var b []byte
	for _, x := range xs {
		b = appendRecord(b, x.Name, x.Value)
	}
	m.Xattrs = string(b)
}

// SetXattr sets attribute name to value, replacing any: the other
// records are copied as they are, in place.
func (m *Meta) SetXattr(name, value string) error {
	if err := records(m.Xattrs, func(string, string, int, int) bool { return true }); err != nil {
		return err
	}
	start, _, end, ok := m.findXattr(name)
	if !ok {
		end = start
	}
	m.Xattrs = m.Xattrs[:start] + string(appendRecord(nil, name, value)) + m.Xattrs[end:]
	return nil
}

// RemoveXattr removes attribute name and reports whether it was there.
func (m *Meta) RemoveXattr(name string) (bool, error) {
	if err := records(m.Xattrs, func(string, string, int, int) bool { return true }); err != nil {
		return false, err
	}
	start, _, end, ok := m.findXattr(name)
	if !ok {
		return false, nil
	}
	m.Xattrs = m.Xattrs[:start] + m.Xattrs[end:]
	return true, nil
}

// appendRecord appends one attribute's record to b.
func appendRecord(b []byte, name, value string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// records calls fn with each attribute record of the encoding s, in
// order, with its span [start, end), until fn returns false; it returns
// ErrXattrs if the records it reads do not parse.
func records(s string, fn func(name, value string, start, end int) bool) error {
	for pos := 0; pos < len(s); {
		name, rest, ok1 := field(s[pos:])
		value, rest, ok2 := field(rest)
		if !ok1 || !ok2 {
			return ErrXattrs
		}
		end := len(s) - len(rest)
		if !fn(name, value, pos, end) {
			return nil
		}
		pos = end
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
