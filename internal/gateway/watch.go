package gateway

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch timings: a change is applied once the files have been quiet for
// watchQuiet, or watchMaxWait after the first event of a burst, whichever
// is first; directories that could not be watched (gone for a moment) are
// tried again every watchRetry.
const (
	watchQuiet   = 150 * time.Millisecond
	watchMaxWait = time.Second
	watchRetry   = time.Second
)

// WatchConfig reloads the configuration, as Reload does but without
// reopening the access log, whenever the configuration file, a file of its
// identity section (API keys, JWT keys) or a descriptor file of
// envoy_rls.config_dir changes, until ctx is done; it
// returns when it has stopped, its goroutines with it.
//
// It watches directories, not files: an editor's atomic rename and
// Kubernetes' ConfigMap update (a new timestamped directory, a ..data_tmp
// symlink renamed over ..data, which the file is a symlink through) both
// replace the file, and a watch on the file would stay on the old one.
// Events are debounced, and a reload happens only when the content read
// differs from the last one seen, so an unrelated file in the same
// directory, or a write of the same bytes, reloads nothing.
func (g *Gateway) WatchConfig(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	last := g.fingerprint()
	dirs := g.syncWatches(w)
	g.log.Info("sluice: watching the configuration for changes", "file", g.path, "dirs", dirs)
	retry := time.NewTicker(watchRetry)
	defer retry.Stop()
	var (
		fire  <-chan time.Time
		first time.Time // the first event not yet applied
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			now := time.Now()
			if fire == nil {
				first = now
			}
			if now.Sub(first) < watchMaxWait {
				fire = time.After(watchQuiet) // restarted by every event of a burst
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			// An overflow loses events: look at the files anyway.
			g.log.Warn("sluice: configuration watch", "err", err)
			fire = time.After(watchQuiet)
		case <-retry.C:
			if before := len(w.WatchList()); len(g.syncWatches(w)) > before {
				fire = time.After(watchQuiet) // a directory came back: it may hold a change
			}
		case <-fire:
			fire = nil
			g.syncWatches(w) // a new subdirectory: watched before it is read
			if fp := g.fingerprint(); fp != last {
				last = fp
				g.mu.Lock()
				_ = g.reloadLocked("watch") // logged; the running configuration stays on error
				g.mu.Unlock()
			}
			g.syncWatches(w)
		}
	}
}

// watchDirs are the directories to watch for the running configuration:
// the configuration file's, its identity files', the descriptor files',
// and, where one goes through symlinks, the directory it leads to.
func (g *Gateway) watchDirs() []string {
	var dirs []string
	add := func(dir string) {
		if dir != "" && !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	for _, f := range append([]string{g.path}, g.Config().IdentityFiles()...) {
		if f == "" {
			continue
		}
		add(filepath.Dir(f))
		if real, err := filepath.EvalSymlinks(f); err == nil {
			add(filepath.Dir(real))
		}
	}
	rls := &g.Config().EnvoyRLS
	if d := rls.Dir(); d != "" {
		add(filepath.Clean(d))
		if real, err := filepath.EvalSymlinks(d); err == nil {
			add(real)
		}
		// A symlink above the directory (RUNTIME_ROOT=…/current, swapped
		// to a new target) changes in its parent.
		for p := filepath.Clean(d); ; {
			parent := filepath.Dir(p)
			if parent == p {
				break
			}
			if info, err := os.Lstat(p); err == nil && info.Mode()&os.ModeSymlink != 0 {
				add(parent)
			}
			p = parent
		}
		_, below := rls.Files()
		for _, sub := range below {
			add(filepath.Clean(sub))
		}
	}
	return dirs
}

// syncWatches makes w watch the directories of watchDirs and no other; it
// returns those watched. A directory that cannot be watched now (it does
// not exist for the moment) is tried again by the next call.
func (g *Gateway) syncWatches(w *fsnotify.Watcher) []string {
	want := g.watchDirs()
	have := w.WatchList()
	for _, d := range have {
		if !slices.Contains(want, d) {
			_ = w.Remove(d)
		}
	}
	var watched []string
	for _, d := range want {
		if slices.Contains(have, d) || w.Add(d) == nil {
			watched = append(watched, d)
		}
	}
	return watched
}

// fingerprint sums what a reload would read: the configuration file, the
// files of its identity section (API keys, JWT keys) and the descriptor
// files of the running envoy_rls.config_dir, names included; a file that
// cannot be read sums as its error.
func (g *Gateway) fingerprint() [sha256.Size]byte {
	h := sha256.New()
	file := func(path string) {
		h.Write([]byte(path + "\x00"))
		if data, err := os.ReadFile(path); err != nil {
			h.Write([]byte("error: " + err.Error()))
		} else {
			h.Write(data)
		}
		h.Write([]byte{0})
	}
	if g.path != "" {
		file(g.path)
	}
	for _, f := range g.Config().IdentityFiles() {
		file(f)
	}
	if d := g.Config().EnvoyRLS.Dir(); d != "" {
		files, _ := g.Config().EnvoyRLS.Files()
		if _, err := os.Stat(d); err != nil {
			h.Write([]byte("error: " + err.Error()))
		}
		for _, f := range files {
			file(f)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
