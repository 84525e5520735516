package advise

import (
	"bytes"
	"math"
	"strings"
)

// Real users are not abusers. A browser asks for files a site does not
// have: source maps (*.map, when its developer tools are open), favicon
// and touch icons, and the like; an office behind one address with
// several browsers sums those 404s. Search engines' crawlers follow stale
// links. Neither is a scanner, so a 404 or 410 (not found, gone) is
// *excused*, not counted by the errors rule (setApart), when its path is
// a static asset (see staticExt) or a well-known icon or robots file, or
// when the line names a well-known crawler (crawlerNames). User agents
// can be forged: a scanner that calls itself Googlebot escapes the errors
// rule for its 404s, but not for its 401s, 403s or 5xx, nor the outlier
// and denied rules, and its traffic still counts as any caller's.

// statusExcused marks, in a record's status, an error the errors rule
// does not count.
const statusExcused = 1 << 14

// crawlerNames are the user agent tokens of well-known crawlers.
var crawlerNames = [][]byte{
	[]byte("Googlebot"), []byte("bingbot"), []byte("Applebot"), []byte("DuckDuckBot"),
	[]byte("YandexBot"), []byte("Baiduspider"), []byte("Slurp"), []byte("AdsBot-Google"),
}

// iconPrefixes and iconNames are the files browsers ask for on their
// own: a name of iconPrefixes alone or followed by '.', '-' or '_'
// (favicon.ico, favicon-32x32.png, mstile-150x150.png), or one of
// iconNames whole. GET /api/favicons is not one.
var (
	iconPrefixes = []string{"favicon", "apple-touch-icon", "android-chrome", "mstile"}
	iconNames    = []string{"browserconfig.xml", "site.webmanifest", "manifest.json", "robots.txt"}
)

// excuse reports whether an answer status to path, on log line line, is
// an error the errors rule does not count.
func excuse(status int, path, line []byte) bool {
	if status != 404 && status != 410 {
		return false
	}
	if isStaticAsset(path) {
		return true
	}
	for _, c := range crawlerNames {
		if bytes.Contains(line, c) {
			return true
		}
	}
	return false
}

// isStaticAsset reports whether path names a static file: its last
// segment has a static file's extension, or is an icon or robots file.
func isStaticAsset(path []byte) bool {
	last := path[bytes.LastIndexByte(path, '/')+1:]
	for _, p := range iconPrefixes {
		if len(last) >= len(p) && strings.EqualFold(string(last[:len(p)]), p) &&
			(len(last) == len(p) || strings.IndexByte(".-_", last[len(p)]) >= 0) {
			return true
		}
	}
	for _, n := range iconNames {
		if strings.EqualFold(string(last), n) {
			return true
		}
	}
	dot := bytes.LastIndexByte(last, '.')
	if dot <= 0 || len(last)-dot > 7 {
		return false
	}
	return staticExt[strings.ToLower(string(last[dot+1:]))]
}

// A class of static assets (a static directory's prefix such as GET /js/,
// or a pattern ending in a static file) serves what a page loads at once:
// a page with twenty scripts asks for them in the same second, and an
// office's browsers share one address. The proposal for such a class is
// at least staticMinRate per second with a burst of at least
// staticMinBurst, whatever the rule gives.
const (
	staticMinRate  = 2   // per second: 120/m
	staticMinBurst = 100 // five page loads of twenty assets at once
)

// isStaticMatch reports whether a class's ServeMux pattern serves static
// assets.
func isStaticMatch(match string) bool {
	_, path, ok := strings.Cut(match, " ")
	if !ok {
		path = match
	}
	path = strings.TrimSuffix(path, "{$}")
	if seg, _, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/"); ok && staticDirs[strings.ToLower(seg)] {
		return true
	}
	return !strings.HasSuffix(path, "/") && !strings.Contains(path, "{") && isStaticAsset([]byte(path))
}

// staticFloor raises p to the floor of a static class.
func staticFloor(p *Proposal, match string) {
	if p.Rate == 0 || !isStaticMatch(match) {
		return
	}
	p.Rate = math.Max(p.Rate, staticMinRate)
	p.Burst = max(p.Burst, staticMinBurst)
	p.Multiplier = int64(math.Round(float64(p.Burst) / p.Rate))
	p.Floor = "static"
}
