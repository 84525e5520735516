package algo

import (
	"hash/maphash"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/owed"
)

const owedWaysInTest = owed.Ways

// checkAt is s.Check at now without validation, for floods of millions.
func checkAt(s Store, req sluice.Request, now int64) {
	s.(*memStore[[]fixedWindow]).checkAt(req, now)
}

// owedSize returns the cells and merged records of s's remembrance.
func owedSize(s Store) (cells, merged int) {
	each(s, func(t *owed.Table[owedState]) { cells += t.Cells(); merged += t.Merged() })
	return cells, merged
}

// owedLive returns the cells of s's remembrance that still owe at now.
func owedLive(s Store, now int64) (n int) {
	each(s, func(t *owed.Table[owedState]) { n += t.Live(now) })
	return n
}

func each(s Store, f func(*owed.Table[owedState])) {
	m := s.(*memStore[[]fixedWindow])
	for i := range m.shards {
		f(&m.shards[i].owed)
	}
}

// holds reports whether s holds key's state in its table.
func (s *memStore[S]) holds(key string) bool {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[h]
	return ok
}
