// Package shrink tells when to rebuild a Go map that has mostly emptied: a
// map keeps the buckets of the most entries it ever held, so a table that
// followed a 100,000-file directory once holds megabytes for good, and the
// collector's heap goal adds half again.
package shrink

// From is the fewest entries at its peak for which a map is rebuilt:
// below, the buckets kept cost less than the copy.
const From = 4096

// Peak is the most entries a map held since it was last rebuilt. The zero
// value is ready.
type Peak struct{ n int }

// Grew records that the map holds n entries now; call it after inserts.
func (p *Peak) Grew(n int) { p.n = max(p.n, n) }

// Due reports whether a map now holding n entries, after deletes, has lost
// three quarters of its peak of at least From: the caller then rebuilds it
// (maps.Collect(maps.All(m)) sizes the copy to n), and the peak is n.
func (p *Peak) Due(n int) bool {
	if p.n < From || n >= p.n/4 {
		return false
	}
	p.n = n
	return true
}
