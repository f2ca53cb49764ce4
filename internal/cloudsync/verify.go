package cloudsync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// Verify checks that the store in be holds what repo's status rows say it
// does: every piece marked synced is in a pack a batch names, within the
// pack's size, and every commit without an unsynced row is in a batch. It
// returns what is missing, one line each; it reads listings and batches,
// not the packs' bytes. An encrypted store's key is the one the repository
// keeps, else opt's secret's.
func Verify(ctx context.Context, repo *store.Repository, be remote.Backend, opt Options) ([]string, error) {
	_, _, key, err := openStore(ctx, repo, be, opt, false)
	if err != nil {
		return nil, err
	}
	s := &Syncer{repo: repo, be: be, key: key} // reads batches only
	packs := map[string]int64{}
	if err := be.List(ctx, packsDir, "", func(o remote.Object) error {
		packs[o.Name] = o.Size
		return nil
	}); err != nil {
		return nil, err
	}
	var batches []string
	if err := be.List(ctx, logsDir, "", func(o remote.Object) error {
		batches = append(batches, o.Name)
		return nil
	}); err != nil {
		return nil, err
	}
	// Batches a collection applied may name packs it deleted since.
	recs, err := s.records(ctx, "")
	if err != nil {
		return nil, err
	}
	var collected *keptCommits
	if len(recs) > 0 {
		collected = &keptCommits{positions: recs[len(recs)-1].rec.Positions}
	}
	var problems []string
	said := map[string]bool{}
	commits := map[store.CommitID]bool{}
	pieces := map[cas.Digest]bool{}
	for _, name := range batches {
		body, err := be.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		if body, err = s.open(name, body); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		b, err := decodeBatch(name, body)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		var moved []pieceRef // where a repack put pieces
		if b.Moved != nil {
			moved = b.Moved.Pieces
		}
		for _, pb := range slices.Concat(b.Pages, []pageBatch{{Pieces: moved}}) {
			for _, c := range pb.Commits {
				commits[store.CommitID(cas.Hash(c))] = true
			}
			for _, r := range pb.Pieces {
				size, ok := packs[r.Pack]
				switch {
				case !ok && collected.covers(b.Device, b.Seq):
				case !ok:
					if line := fmt.Sprintf("batch %s names pack %s, which the remote does not hold", name, r.Pack); !said[line] {
						said[line] = true
						problems = append(problems, line)
					}
				case r.Off < 0 || r.Len < 0 || r.Off+r.Len > size:
					problems = append(problems, fmt.Sprintf("batch %s puts piece %s past the end of pack %s", name, cas.Digest(r.Digest), r.Pack))
				default:
					pieces[cas.Digest(r.Digest)] = true
				}
			}
		}
	}
	ledgers, err := repo.Ledgers()
	if err != nil {
		return nil, err
	}
	for _, l := range ledgers {
		pages, err := repo.Pages(l)
		if err != nil {
			return nil, err
		}
		for _, pg := range pages {
			p, err := repo.Acquire(l, pg)
			if err != nil {
				return nil, err
			}
			lines, err := verifyPage(p, commits, pieces)
			repo.Release(p)
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", l, pg, err)
			}
			for _, s := range lines {
				problems = append(problems, l+"/"+pg+": "+s)
			}
		}
	}
	return problems, nil
}

// maxListed bounds the pieces or commits a problem line names.
const maxListed = 5

func verifyPage(p *store.Page, commits map[store.CommitID]bool, pieces map[cas.Digest]bool) ([]string, error) {
	var missing []string
	if err := p.Pieces(store.Synced, func(d cas.Digest) error {
		if !pieces[d] {
			missing = append(missing, d.String())
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var out []string
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("%d pieces marked synced are in no pack of the remote: %s", len(missing), listed(missing)))
	}
	unsynced := map[store.CommitID]bool{}
	if err := p.UnsyncedCommits(func(id store.CommitID) error { unsynced[id] = true; return nil }); err != nil {
		return nil, err
	}
	missing = nil
	if err := p.CommitIDs(nil, func(id store.CommitID) error {
		if id != store.FirstCommitID && !unsynced[id] && !commits[id] {
			missing = append(missing, id.String())
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("%d commits not marked unsynced are in no batch of the remote: %s", len(missing), listed(missing)))
	}
	return out, nil
}

func listed(s []string) string {
	if len(s) > maxListed {
		return strings.Join(s[:maxListed], ", ") + ", …"
	}
	return strings.Join(s, ", ")
}
