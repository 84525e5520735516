package advise

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Grouping turns the many endpoint classes of a real site (one per page,
// image and stylesheet) into a handful of policies an operator can read
// and keep: the busiest routes get policies of their own, and the rest is
// governed by one deliberate catch-all, `default` (pattern `/`, every
// method), sized like any other policy on exactly the requests it
// governs. Policies are still ServeMux patterns, so the gateway routes
// them as they were measured.
//
//   - A static asset (a path whose last segment ends in a static file's
//     extension, see staticExt) is not a route of its own. Under a
//     well-known static directory (staticDirs: /images/, /css/, …) it
//     falls into that directory's prefix pattern (GET /images/); anywhere
//     else into its method's catch-all, which the default governs: a
//     ServeMux pattern cannot select a file by its extension.
//   - A pattern with less than --min-share of the requests is rare: the
//     default governs it.
//   - At most --max-policies policies, the default included: the busiest
//     patterns are kept, the rest go to the default.

// defaultPolicy is the name of the catch-all policy grouping writes.
const defaultPolicy = "default"

// defaultMatch is its pattern: every method, every path no other policy
// matches.
const defaultMatch = "/"

// staticExt are the extensions of static files: images, styles, scripts,
// fonts and media. Pages (.html), documents (.pdf, .txt) and downloads are
// not: they are what a site serves, and may deserve a policy.
var staticExt = map[string]bool{
	"css": true, "js": true, "mjs": true, "map": true,
	"png": true, "jpg": true, "jpeg": true, "gif": true, "ico": true, "svg": true, "svgz": true,
	"webp": true, "avif": true, "bmp": true, "tif": true, "tiff": true, "cur": true, "xbm": true,
	"woff": true, "woff2": true, "ttf": true, "otf": true, "eot": true,
	"mp3": true, "mp4": true, "webm": true, "ogg": true, "ogv": true, "wav": true, "flac": true, "swf": true,
}

// staticDirs are first path segments that hold static files on most sites.
var staticDirs = map[string]bool{
	"static": true, "assets": true, "images": true, "image": true, "img": true, "imgs": true,
	"css": true, "js": true, "javascript": true, "javascripts": true, "scripts": true,
	"stylesheets": true, "styles": true, "fonts": true, "font": true, "icons": true,
	"media": true, "dist": true, "build": true, "public": true, "vendor": true,
	"_next": true, "_nuxt": true, "favicons": true,
}

// appendStaticPattern appends the group pattern of a static asset's
// request to dst and reports true, or returns dst unchanged and false
// when path is not a static asset: the prefix pattern of its first
// segment when that is a static directory (GET /images/), else its
// method's catch-all (GET /), which the default governs.
func appendStaticPattern(dst, method, path []byte) ([]byte, bool) {
	last := path
	if i := bytes.LastIndexByte(path, '/'); i >= 0 {
		last = path[i+1:]
	}
	dot := bytes.LastIndexByte(last, '.')
	if dot <= 0 || dot == len(last)-1 || len(last)-dot > 6 {
		return dst, false
	}
	var ext [6]byte
	n := copy(ext[:], last[dot+1:])
	for i := range n {
		if c := ext[i]; c >= 'A' && c <= 'Z' {
			ext[i] = c + 'a' - 'A'
		}
	}
	if !staticExt[string(ext[:n])] {
		return dst, false
	}
	dst = append(dst, method...)
	dst = append(dst, " /"...)
	rest := bytes.TrimLeft(path, "/")
	if j := bytes.IndexByte(rest, '/'); j > 0 && staticDirs[strings.ToLower(string(rest[:j]))] && literal(rest[:j]) {
		dst = append(dst, rest[:j]...)
		dst = append(dst, '/')
	}
	return dst, true
}

// groupRoutes chooses the policies of the configuration from the
// classes of the first pass: the patterns with at least minShare of the
// requests, busiest first, that register beside the busier ones, at most
// maxPolicies-1 of them, and the default when anything is left for it.
// It returns them sorted by name,
// with a note on each pattern a conflict sends to the default.
func groupRoutes(rep *Report, maxPolicies int, minShare float64) ([]configPolicy, []string) {
	matches, traffic := busiestMatches(rep)
	names := make(map[string]string)
	var total uint64
	for _, c := range rep.Classes {
		names[c.Match] = c.Policy
		total += c.PerSecond.Requests
	}
	var out []configPolicy
	var notes []string
	mux := http.NewServeMux()
	for _, m := range matches {
		_, path, _ := strings.Cut(m, " ")
		if path == "/" || len(out) >= maxPolicies-1 || float64(traffic[m]) < minShare*float64(total) {
			continue
		}
		if err := registerPattern(mux, m); err != nil {
			notes = append(notes, fmt.Sprintf("%s goes to the default policy: pattern %s", m, firstLine(err)))
			continue
		}
		out = append(out, configPolicy{Name: names[m], Match: m})
	}
	if len(out) < len(matches) {
		out = append(out, configPolicy{Name: defaultPolicy, Match: defaultMatch})
	}
	slices.SortFunc(out, func(a, b configPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out, notes
}

// defaultNote says what the default policy governs, once the routes are
// measured; empty when there is no default.
func defaultNote(rep *Report, policies []configPolicy, minShare float64) string {
	if !slices.ContainsFunc(policies, func(p configPolicy) bool { return p.Name == defaultPolicy }) {
		return ""
	}
	var all, def uint64
	for _, c := range rep.Classes {
		all += c.PerSecond.Requests
		if c.Policy == defaultPolicy {
			def += c.PerSecond.Requests
		}
	}
	return fmt.Sprintf("%d policies: %d routes with at least %.3g%% of the requests each, busiest first, and %q (match %q), which governs the other %d requests (%.1f%%): static assets outside a static directory, rare paths, and routes past --max-policies",
		len(policies), len(policies)-1, 100*minShare, defaultPolicy, defaultMatch, def, pct(int64(def), int64(all)))
}
