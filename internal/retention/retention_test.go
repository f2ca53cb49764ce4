package retention

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func drawCommits(t *rapid.T) []Commit {
	n := rapid.IntRange(0, 60).Draw(t, "n")
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	cs := make([]Commit, n)
	for i := range cs {
		// Up to 90 days back, in minutes: buckets of every rule fill.
		cs[i].Time = base.Add(-time.Duration(rapid.IntRange(0, 90*24*60).Draw(t, "minutes")) * time.Minute)
		cs[i].ID[0], cs[i].ID[1] = byte(i), byte(i>>8)
	}
	Sort(cs)
	return cs
}

// TestBucketRules checks each rule alone against its definition: the newest
// commit of each of the N newest buckets that have one.
func TestBucketRules(t *testing.T) {
	rules := []struct {
		name string
		set  func(p *Policy, n int)
		key  func(time.Time) string
	}{
		{"hourly", func(p *Policy, n int) { p.Hourly = n }, func(t time.Time) string { return t.Format("2006-01-02 15") }},
		{"daily", func(p *Policy, n int) { p.Daily = n }, func(t time.Time) string { return t.Format("2006-01-02") }},
		{"weekly", func(p *Policy, n int) { p.Weekly = n }, func(t time.Time) string {
			y, w := t.ISOWeek()
			return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).Format("2006") + "w" + string(rune('A'+w))
		}},
		{"monthly", func(p *Policy, n int) { p.Monthly = n }, func(t time.Time) string { return t.Format("2006-01") }},
	}
	for _, rule := range rules {
		t.Run(rule.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cs := drawCommits(t)
				n := rapid.IntRange(1, 10).Draw(t, "count")
				var p Policy
				rule.set(&p, n)
				keep := p.Keep(cs)
				newestOf := map[string]int{} // bucket -> index of its newest commit
				var buckets []string
				for i, c := range cs {
					k := rule.key(c.Time)
					if _, ok := newestOf[k]; !ok {
						newestOf[k] = i
						buckets = append(buckets, k)
					}
				}
				want := make([]bool, len(cs))
				for _, b := range buckets[:min(n, len(buckets))] {
					want[newestOf[b]] = true
				}
				if !slices.Equal(keep, want) {
					t.Fatalf("kept %v, want %v", keep, want)
				}
			})
		})
	}
}

// TestRulesAdd checks keep-last and keep-within, and that a rule added to a
// policy never drops a commit it kept.
func TestRulesAdd(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cs := drawCommits(t)
		p := Policy{
			Last:   rapid.IntRange(0, 5).Draw(t, "last"),
			Within: time.Duration(rapid.IntRange(0, 72).Draw(t, "within hours")) * time.Hour,
			Hourly: rapid.IntRange(0, 5).Draw(t, "hourly"),
			Daily:  rapid.IntRange(0, 5).Draw(t, "daily"),
		}
		if p.IsZero() {
			p.Last = 1
		}
		keep := p.Keep(cs)
		for i, c := range cs {
			if i < p.Last && !keep[i] {
				t.Fatalf("commit %d of the newest %d not kept", i, p.Last)
			}
			if p.Within > 0 && c.Time.After(cs[0].Time.Add(-p.Within)) && !keep[i] {
				t.Fatalf("commit %d within %v of the newest not kept", i, p.Within)
			}
		}
		more := p
		more.Weekly = rapid.IntRange(1, 5).Draw(t, "weekly")
		keepMore := more.Keep(cs)
		for i := range keep {
			if keep[i] && !keepMore[i] {
				t.Fatalf("adding keep-weekly dropped commit %d", i)
			}
		}
		all := Policy{All: true}.Keep(cs)
		if slices.Contains(all, false) {
			t.Fatal("keep-all dropped a commit")
		}
	})
}

// drawPolicy draws a policy of a few rules (none, or all: keep-all).
func drawPolicy(t *rapid.T, label string) Policy {
	rule := func(name string, hi int) int {
		if rapid.Bool().Draw(t, label+" has "+name) {
			return rapid.IntRange(1, hi).Draw(t, label+" "+name)
		}
		return 0
	}
	return Policy{
		All:     rapid.IntRange(0, 9).Draw(t, label+" all") == 0,
		Last:    rule("last", 5),
		Within:  time.Duration(rule("within hours", 72)) * time.Hour,
		Hourly:  rule("hourly", 5),
		Daily:   rule("daily", 5),
		Weekly:  rule("weekly", 3),
		Monthly: rule("monthly", 3),
	}
}

// TestUnion: the union of two policies keeps every commit either keeps.
func TestUnion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cs := drawCommits(t)
		p, o := drawPolicy(t, "p"), drawPolicy(t, "o")
		u := p.Union(o)
		kp, ko, ku := p.Keep(cs), o.Keep(cs), u.Keep(cs)
		for i := range cs {
			if (kp[i] || ko[i]) && !ku[i] {
				t.Fatalf("%v ∪ %v = %v drops commit %d, which %v keeps and %v keeps %v", p, o, u, i, p, o, ko[i])
			}
		}
	})
}

func TestParseRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := Policy{
			Last:    rapid.IntRange(0, 100).Draw(t, "last"),
			Within:  time.Duration(rapid.IntRange(0, 1000).Draw(t, "within")) * time.Minute,
			Hourly:  rapid.IntRange(0, 100).Draw(t, "hourly"),
			Daily:   rapid.IntRange(0, 100).Draw(t, "daily"),
			Weekly:  rapid.IntRange(0, 100).Draw(t, "weekly"),
			Monthly: rapid.IntRange(0, 100).Draw(t, "monthly"),
		}
		if p.IsZero() {
			p.All = true
		}
		got, err := Parse(p.String())
		if err != nil || got != p {
			t.Fatalf("Parse(%q) = %+v, %v; want %+v", p.String(), got, err, p)
		}
	})
}

func TestParseRefuses(t *testing.T) {
	for _, s := range []string{"", "keep-last", "keep-last=x", "keep-last=-1", "keep-all keep-last=1", "keep-last=0", "keep-yearly=1", "keep-within=3q", "keep-within=d"} {
		if p, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, p)
		}
	}
	if d, err := ParseDuration("2y5m7d3h"); err != nil || d != (2*365+5*30+7)*24*time.Hour+3*time.Hour {
		t.Errorf("ParseDuration(2y5m7d3h) = %v, %v", d, err)
	}
}

// A duration written in restic's units reads back in them, largest first.
func TestFormatDurationInUnits(t *testing.T) {
	for _, s := range []string{"2y5m7d3h", "1h", "1d6h", "1y", "1y3m", "90d", "1m7d", "1d", "1y1h"} {
		d, err := ParseDuration(s)
		if err != nil || FormatDuration(d) != s {
			t.Errorf("%s reads back as %s (%v)", s, FormatDuration(d), err)
		}
	}
	if got := FormatDuration(90 * time.Minute); got != "1h30m0s" {
		t.Errorf("90 minutes read back as %s", got)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("keep-within=1h keep-hourly=48 keep-daily=30")
	f.Add("keep-all")
	f.Add("keep-last=3,keep-within=2y5m")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			return
		}
		q, err := Parse(p.String())
		if err != nil || q != p {
			t.Fatalf("%q parsed as %+v, which writes %q and reads back as %+v, %v", s, p, p.String(), q, err)
		}
	})
}
