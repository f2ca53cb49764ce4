package fs

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// keyMap against a map: every change and query agrees, Under lists exactly
// the keys with the prefix, in order, and stops when told; a clone keeps
// what the original held when it was taken, whatever changes follow.
func TestKeyMapModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.StringMatching(`[ab/]{0,4}`)
		var m keyMap[int]
		model := map[string]int{}
		type clone struct {
			m    keyMap[int]
			want map[string]int
		}
		var clones []clone
		for i := range rapid.IntRange(0, 200).Draw(t, "ops") {
			k := key.Draw(t, "key")
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0, 1:
				m.Set(k, i)
				model[k] = i
			case 2:
				m.Delete(k)
				delete(model, k)
			case 3:
				clones = append(clones, clone{m.Clone(), maps.Clone(model)})
			case 4:
				var want []string
				for mk := range model {
					if strings.HasPrefix(mk, k) {
						want = append(want, mk)
					}
				}
				slices.Sort(want)
				var got []string
				all := m.Under(k, func(gk string, v int) bool {
					if v != model[gk] {
						t.Fatalf("Under(%q) gave %q=%d, want %d", k, gk, v, model[gk])
					}
					got = append(got, gk)
					return true
				})
				if !all || !slices.Equal(got, want) {
					t.Fatalf("Under(%q) = %q (all %v), want %q", k, got, all, want)
				}
				if len(want) > 0 && m.Under(k, func(string, int) bool { return false }) {
					t.Fatalf("Under(%q) went on after fn returned false", k)
				}
			}
			v, ok := m.Get(k)
			if mv, mok := model[k]; v != mv || ok != mok {
				t.Fatalf("Get(%q) = %d, %v; want %d, %v", k, v, ok, mv, mok)
			}
			if m.Len() != len(model) {
				t.Fatalf("Len %d, want %d", m.Len(), len(model))
			}
		}
		for i, c := range clones {
			got := map[string]int{}
			c.m.Under("", func(k string, v int) bool {
				got[k] = v
				return true
			})
			if !maps.Equal(got, c.want) {
				t.Fatalf("clone %d holds %v, want %v", i, got, c.want)
			}
		}
	})
}
