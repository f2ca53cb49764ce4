// Package retention decides which commits of a page a collection keeps,
// with restic's rules (keep-last, keep-within and one commit per hour,
// day, week or month), and reads and writes policies as text.
//
// Layer: no dependencies on the rest of ledgerfs; gc and the command line
// use it.
package retention

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Policy says which commits to keep. Every rule keeps what it selects; a
// commit is kept if any rule keeps it. The zero Policy keeps everything.
type Policy struct {
	All     bool          // keep every commit (no other rule applies)
	Last    int           // the newest Last commits
	Within  time.Duration // every commit within Within of the newest one
	Hourly  int           // the newest commit of each of the last Hourly hours that have one
	Daily   int           // … days …
	Weekly  int           // … ISO weeks …
	Monthly int           // … months …
}

// Default keeps every commit of the last hour (undo what you just did),
// one an hour for two days, one a day for a month and one a week for three
// months: at most about a hundred and a half commits older than an hour,
// so the space history holds is bounded by what changed, not by how often.
var Default = Policy{Within: time.Hour, Hourly: 48, Daily: 30, Weekly: 12}

// IsZero reports whether p has no rule at all; it keeps everything.
func (p Policy) IsZero() bool { return p == Policy{} }

// keepsAll reports whether p keeps every commit.
func (p Policy) keepsAll() bool { return p.All || p.IsZero() }

// Union keeps every commit p or o keeps: the greater of each rule (each
// rule keeps more commits as its count or duration grows).
func (p Policy) Union(o Policy) Policy {
	if p.keepsAll() || o.keepsAll() {
		return Policy{All: true}
	}
	return Policy{Last: max(p.Last, o.Last), Within: max(p.Within, o.Within), Hourly: max(p.Hourly, o.Hourly),
		Daily: max(p.Daily, o.Daily), Weekly: max(p.Weekly, o.Weekly), Monthly: max(p.Monthly, o.Monthly)}
}

// String is the policy as Parse reads it: "keep-within=1h keep-hourly=48".
func (p Policy) String() string {
	if p.keepsAll() {
		return "keep-all"
	}
	var f []string
	add := func(name string, n int) {
		if n > 0 {
			f = append(f, name+"="+strconv.Itoa(n))
		}
	}
	add("keep-last", p.Last)
	if p.Within > 0 {
		f = append(f, "keep-within="+FormatDuration(p.Within))
	}
	add("keep-hourly", p.Hourly)
	add("keep-daily", p.Daily)
	add("keep-weekly", p.Weekly)
	add("keep-monthly", p.Monthly)
	return strings.Join(f, " ")
}

// Parse reads a policy: "keep-all", or rules "keep-last=N",
// "keep-within=DURATION", "keep-hourly=N", "keep-daily=N", "keep-weekly=N",
// "keep-monthly=N" separated by spaces or commas.
func Parse(s string) (Policy, error) {
	var p Policy
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	if len(fields) == 0 {
		return p, errors.New("retention: empty policy (say keep-all to keep everything)")
	}
	for _, f := range fields {
		if f == "keep-all" {
			p.All = true
			continue
		}
		name, val, ok := strings.Cut(f, "=")
		if !ok {
			return Policy{}, fmt.Errorf("retention: %q: want a rule=value, like keep-last=10", f)
		}
		if name == "keep-within" {
			d, err := ParseDuration(val)
			if err != nil {
				return Policy{}, err
			}
			p.Within = d
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return Policy{}, fmt.Errorf("retention: %s=%q: want a count, 0 or more", name, val)
		}
		switch name {
		case "keep-last":
			p.Last = n
		case "keep-hourly":
			p.Hourly = n
		case "keep-daily":
			p.Daily = n
		case "keep-weekly":
			p.Weekly = n
		case "keep-monthly":
			p.Monthly = n
		default:
			return Policy{}, fmt.Errorf("retention: unknown rule %q (keep-all, keep-last, keep-within, keep-hourly, keep-daily, keep-weekly, keep-monthly)", name)
		}
	}
	if p.All && p != (Policy{All: true}) {
		return Policy{}, errors.New("retention: keep-all takes no other rule")
	}
	if p.IsZero() {
		return Policy{}, errors.New("retention: every rule is 0, which would keep only the head; say keep-last=1 for that")
	}
	return p, nil
}

// ParseDuration reads a duration as restic writes them, "2y5m7d3h"
// (years of 365 days, months of 30), or as Go does ("90m", "1h30m").
func ParseDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	var total time.Duration
	rest := s
	for rest != "" {
		i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if i <= 0 {
			return 0, fmt.Errorf("retention: duration %q: want numbers with units, like 30d or 2y5m7d3h", s)
		}
		n, err := strconv.Atoi(rest[:i])
		if err != nil {
			return 0, fmt.Errorf("retention: duration %q: %w", s, err)
		}
		unit := map[byte]time.Duration{'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour, 'm': 30 * 24 * time.Hour, 'y': 365 * 24 * time.Hour}[rest[i]]
		if unit == 0 {
			return 0, fmt.Errorf("retention: duration %q: unknown unit %q (h, d, w, m, y)", s, rest[i])
		}
		if time.Duration(n) > (math.MaxInt64-total)/unit {
			return 0, fmt.Errorf("retention: duration %q is too long", s)
		}
		total += time.Duration(n) * unit
		rest = rest[i+1:]
	}
	return total, nil
}

// FormatDuration writes d in ParseDuration's units, largest first, when it
// is a whole number of hours (2y5m7d3h reads back as written; 30d as 1m,
// the same span), else as Go does. Months with neither years nor days
// are written as days: Go would read "3m" as minutes.
func FormatDuration(d time.Duration) string {
	if d <= 0 || d%time.Hour != 0 {
		return d.String()
	}
	const day = 24 * time.Hour
	y, rest := d/(365*day), d%(365*day)
	m, rest := rest/(30*day), rest%(30*day)
	dd, h := rest/day, rest%day/time.Hour
	if y == 0 && dd == 0 {
		m, dd = 0, m*30
	}
	var b strings.Builder
	for _, u := range []struct {
		n    time.Duration
		name string
	}{{y, "y"}, {m, "m"}, {dd, "d"}, {h, "h"}} {
		if u.n > 0 {
			b.WriteString(strconv.FormatInt(int64(u.n), 10) + u.name)
		}
	}
	return b.String()
}

// Commit is what a policy looks at: a commit's time.
type Commit struct {
	ID   [32]byte
	Time time.Time
}

// Keep returns the indexes of the commits p keeps, given commits sorted
// newest first, as restic's forget does: buckets are in UTC, and keep-within
// counts back from the newest commit, not from now, so that a page left
// alone keeps its last history however long it waits.
func (p Policy) Keep(commits []Commit) []bool {
	keep := make([]bool, len(commits))
	if p.keepsAll() {
		for i := range keep {
			keep[i] = true
		}
		return keep
	}
	if len(commits) == 0 {
		return keep
	}
	newest := commits[0].Time
	for i, c := range commits {
		if i < p.Last || p.Within > 0 && !c.Time.Before(newest.Add(-p.Within)) {
			keep[i] = true
		}
	}
	buckets := []struct {
		n   int
		key func(t time.Time) string
	}{
		{p.Hourly, func(t time.Time) string { return t.Format("2006-01-02T15") }},
		{p.Daily, func(t time.Time) string { return t.Format("2006-01-02") }},
		{p.Weekly, func(t time.Time) string { y, w := t.ISOWeek(); return fmt.Sprintf("%d-%d", y, w) }},
		{p.Monthly, func(t time.Time) string { return t.Format("2006-01") }},
	}
	for _, b := range buckets {
		last, n := "", 0
		for i, c := range commits {
			if n >= b.n {
				break
			}
			if k := b.key(c.Time.UTC()); k != last {
				keep[i] = true
				last = k
				n++
			}
		}
	}
	return keep
}

// Sort orders commits newest first, as Keep wants them.
func Sort(commits []Commit) {
	slices.SortStableFunc(commits, func(a, b Commit) int { return b.Time.Compare(a.Time) })
}
