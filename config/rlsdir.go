package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files returns the descriptor files that a load of the running
// configuration reads, and the directories that hold them (the
// configuration directory and, read as envoyproxy/ratelimit reads it,
// every directory below), for the file watch. Both are empty without a
// config_dir.
func (e *EnvoyRLS) Files() (files, dirs []string) {
	if e.dir == "" {
		return nil, nil
	}
	files, dirs, _, _ = e.listFiles()
	return files, dirs
}

// listFiles lists the descriptor files of the configuration directory,
// the directories read, and the files skipped (sluice's way only: the
// files not named *.yaml or *.yml).
//
// sluice's way reads the directory's own *.yaml and *.yml files. The way
// of envoyproxy/ratelimit (Upstream set) is its runtime loader's: every
// file, whatever its name, in the directory and below; a directory or
// file whose name starts with a dot is skipped only under
// RUNTIME_IGNOREDOTFILES; a symlink is followed to a file but not to a
// directory (the walk does not descend through it), so that a Kubernetes
// ConfigMap mount's ..data link is not read twice, while its timestamped
// ..2026_… directory is, unless dotfiles are ignored: as there.
func (e *EnvoyRLS) listFiles() (files, dirs, skipped []string, err error) {
	dir := e.dir
	if e.Upstream == nil {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, de := range entries {
			name := de.Name()
			path := filepath.Join(dir, name)
			if ext := filepath.Ext(name); (ext == ".yaml" || ext == ".yml") && !de.IsDir() {
				files = append(files, path)
			} else if !strings.HasPrefix(name, ".") && !isDir(path) {
				skipped = append(skipped, path)
			}
		}
		return files, []string{dir}, skipped, nil
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, nil, err
	}
	ignoreDot := e.Upstream.IgnoreDotFiles
	err = filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // gone while walking, or unreadable: as there, skipped
		}
		dot := path != dir && strings.HasPrefix(de.Name(), ".")
		if de.IsDir() {
			if dot && ignoreDot {
				return filepath.SkipDir
			}
			dirs = append(dirs, path)
			return nil
		}
		if dot && ignoreDot {
			return nil
		}
		if de.Type()&fs.ModeSymlink != 0 && isDir(path) {
			return nil // the walk does not follow a link to a directory
		}
		files = append(files, path)
		return nil
	})
	if len(dirs) == 0 {
		// The directory itself is a symlink (WalkDir does not follow it).
		dirs = []string{dir}
		if real, rerr := filepath.EvalSymlinks(dir); rerr == nil && real != dir {
			e2 := *e
			e2.dir = real
			var d2 []string
			files, d2, _, err = e2.listFiles()
			dirs = append(dirs, d2...)
		}
	}
	return files, dirs, nil, err
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
