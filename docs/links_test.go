package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile("(?m)^#{1,6} +(.+)$")
	fenced  = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && r != '→' && r != '—' && r != '·':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of a markdown file's headings.
func anchors(src string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fenced.ReplaceAllString(src, ""), -1) {
		out[slug(m[1])] = true
	}
	return out
}

// Every relative link of the README and docs/ leads to a file of the
// repository, and to a heading of it when it names one.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	names := []string{"README.md"}
	docs, _ := filepath.Glob("*.md")
	for _, d := range docs {
		names = append(names, filepath.Join("docs", d))
	}
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		text := fenced.ReplaceAllString(string(src), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(name), file)
			if file == "" {
				path = name
			}
			data, err := os.ReadFile(filepath.Join(root, path))
			if err != nil {
				if info, serr := os.Stat(filepath.Join(root, path)); serr == nil && info.IsDir() {
					continue
				}
				t.Errorf("%s: link %s: no such file %s", name, target, path)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(string(data))[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", name, target, path, anchor)
			}
		}
	}
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"What is running, and what waits for me?":         "what-is-running-and-what-waits-for-me",
		"Live views: jetloop ui and jetloop top":          "live-views-jetloop-ui-and-jetloop-top",
		"Metrics and traces (issue 14): before and after": "metrics-and-traces-issue-14-before-and-after",
		"Reading a log: both layouts":                     "reading-a-log-both-layouts",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
