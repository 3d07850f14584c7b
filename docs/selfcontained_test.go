package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// This file names every banned citation in order to find it, so it is the
// one file the scan skips.
const selfFile = "docs/selfcontained_test.go"

// A reason given in a comment or a doc must be readable in a clone: a
// citation of a document the repository does not hold (a design note, a
// specification, a research file kept elsewhere), a section sign that
// leads nowhere, a Markdown link to a missing file or heading, or the
// number of a tracker issue all leave the reader with a pointer instead of
// the reason. TestRepositoryIsSelfContained scans every text file of the
// repository for them.
//
// What is allowed: sections of public standards ("RFC 9110 §15.4.5"),
// sections of a repository document named before them ("design.md §…" is
// checked against its headings), and issues of other public projects
// named with their repository ("envoyproxy/envoy#46237").
func TestRepositoryIsSelfContained(t *testing.T) {
	repo, err := scanRepository("..")
	if err != nil {
		t.Fatal(err)
	}
	if repo.scanned < 200 {
		t.Fatalf("scanned only %d files: the walk is broken", repo.scanned)
	}
	for _, f := range repo.findings {
		t.Errorf("%s:%d: %s\n\t%s", f.file, f.line, f.why, strings.TrimSpace(f.text))
	}
}

// The scan catches each kind of citation, and lets through what resolves.
func TestSelfContainedCheckCatchesCitations(t *testing.T) {
	repo, err := newRepository("..")
	if err != nil {
		t.Fatal(err)
	}
	// The planted citations are put together at run time, so that this
	// file reads, to a grep as to a person, as naming no outside document
	// itself: each is an outside document's name (upper or lower case, as
	// writers cite them) and what a citation of it looks like.
	doc := func(parts ...string) string { return strings.Join(parts, "") }
	bad := []string{
		"// the reason is in " + strings.ToUpper(doc("des", "ign")) + " §6.6.",
		"// shape 2 of the " + doc("sp", "ec") + " §2.5",
		"// the answer changed (spec fetch rule 6)",
		"// Must show 3: a stream that falls behind ends",
		"// see " + doc("zilla", "-behaviour") + ".md",
		"// the numbers in " + doc("peers", "-and-", "limits"),
		"// read " + doc("..", "/", "shared") + "/notes",
		"// verified in Envoy (reference §4.8 [code])",
		"// added for issue 20",
		"// tracked in #17",
		"see [the design](nowhere.md)",
		"see [a heading](architecture.md#no-such-heading)",
		"see [a file](../examples/none)",
		"see docs/design.md §99",
	}
	for _, line := range bad {
		if why := repo.checkLine("docs/x.md", line, ""); why == "" {
			t.Errorf("not caught: %s", line)
		}
	}
	good := []string{
		"// RFC 9110 §15.4.5: a 304 carries the representation headers",
		"// (RFC 9457",
		"// Envoy ignores it (envoyproxy/envoy#46237).",
		"see [architecture](architecture.md#who-owns-what), [Envoy](https://www.envoyproxy.io/docs/x.md) and docs/configuration.md",
		"PKCS#12, %#v, [examples](../examples/http.kafka.crud)",
	}
	for _, line := range good {
		if why := repo.checkLine("docs/x.md", line, ""); why != "" {
			t.Errorf("wrongly caught (%s): %s", why, line)
		}
	}
	if why := repo.checkLine("processor/x.go", "\t// the reason: docs/design.md#no-such-heading", ""); why == "" {
		t.Error("not caught: a link from Go to a missing heading")
	}
	for _, line := range []string{"\t// see docs/design.md#drain", "\tmd := tc.md // a field, not a file"} {
		if why := repo.checkLine("processor/x.go", line, ""); why != "" {
			t.Errorf("wrongly caught (%s): %s", why, line)
		}
	}
	if why := repo.checkLine("processor/x.go", "§6.6: what the broker said", "// RFC 9457"); why != "" {
		t.Errorf("a section continued from the line above: %s", why)
	}
}

type finding struct {
	file string
	line int
	text string
	why  string
}

type repository struct {
	root     string
	files    map[string]bool            // every file and directory, slash-separated, relative to root
	base     map[string]bool            // base names of the Markdown files
	headings map[string]map[string]bool // Markdown file -> heading anchors and numbers
	scanned  int
	findings []finding
}

// newRepository lists the files of the tree at root.
func newRepository(root string) (*repository, error) {
	r := &repository{root: root, files: map[string]bool{}, base: map[string]bool{}, headings: map[string]map[string]bool{}}
	return r, r.walk()
}

// scanRepository checks every line of the text files under root.
func scanRepository(root string) (*repository, error) {
	r, err := newRepository(root)
	if err != nil {
		return nil, err
	}
	var names []string
	for f := range r.files {
		if scanned(f) {
			names = append(names, f)
		}
	}
	sort.Strings(names)
	for _, f := range names {
		if err := r.scanFile(f); err != nil {
			return nil, err
		}
		r.scanned++
	}
	return r, nil
}

// walk records every file of the tree, skipping what is not the project's:
// hidden directories (.git) and build output.
func (r *repository) walk() error {
	return filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || rel == "data") {
			return filepath.SkipDir
		}
		r.files[rel] = true
		if !d.IsDir() && strings.HasSuffix(rel, ".md") {
			r.base[path.Base(rel)] = true
		}
		return nil
	})
}

// scanned says whether f is a text file whose words a reader reads: code,
// docs, configuration, schemas, scripts and test data, not fuzz corpora.
func scanned(f string) bool {
	if f == selfFile || strings.Contains(f, "/testdata/fuzz/") {
		return false
	}
	switch path.Ext(f) {
	case ".go", ".md", ".yaml", ".yml", ".proto", ".sh", ".json", ".txt", ".errors", ".avsc":
		return true
	}
	switch path.Base(f) {
	case "Makefile", "Dockerfile":
		return true
	}
	return strings.HasPrefix(f, "scripts/")
}

func (r *repository) scanFile(f string) error {
	file, err := os.Open(filepath.Join(r.root, filepath.FromSlash(f)))
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	prev := ""
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if why := r.checkLine(f, line, prev); why != "" {
			r.findings = append(r.findings, finding{file: f, line: n, text: line, why: why})
		}
		prev = line
	}
	return sc.Err()
}

var (
	// Documents the repository has never held, by the names they were cited
	// with, and the "Must show" items of tracker issues. Each name is put
	// together from two parts, so that this file itself names none of them.
	banned = regexp.MustCompile(strings.Join([]string{
		`\bDES` + `IGN\b`,
		`\bsp` + `ec(?: §|/| fetch| produce| rule)`,
		`(?i:must` + ` show [0-9])`,
		`zilla-` + `behaviou?r`,
		`peers-` + `and-limits`,
		`\.\./` + `shared\b`,
		`envoy-ext-` + `proc\.md`,
		`envoy-` + `unverified`,
		`\bmod` + `els\.md`,
		`\bbind` + `ings\.md`,
		`\brefer` + `ence/[a-z-]+\.md`,
	}, "|"))
	// Substrings, lower case, of which a line matching banned holds one.
	bannedHints = []string{"des" + "ign", "sp" + "ec", "must" + " show", "zilla-" + "behavio", "peers-" + "and-limits",
		"../" + "shared", "envoy-ext-" + "proc.md", "envoy-" + "unverified", "mod" + "els.md", "bind" + "ings.md", "refer" + "ence/"}
	// A tracker issue: "issue 9", "issues 3 and 9", "#17" standing alone.
	issueWord = regexp.MustCompile(`(?i)\bissues? #?[0-9]+`)
	issueHash = regexp.MustCompile(`(?:^|[\s(\[,;:])#[0-9]+(?:$|[^\w-])`)
	// A section sign and its number.
	section = regexp.MustCompile(`§\s*([0-9]+(?:\.[0-9]+)*)`)
	// What a section belongs to, the nearest one before it counts.
	sectionOwner = regexp.MustCompile(`RFC ?[0-9]+|[A-Za-z0-9_./-]+\.md\b`)
	// A Markdown file named in text, with an optional anchor.
	mdName = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b(#[A-Za-z0-9_-]+)?`)
	// The start of a Go comment (not the // of a URL).
	goComment = regexp.MustCompile(`(?:^|[^:])//`)
	// A Markdown link target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// checkLine returns why line of file f cites what the repository does not
// hold, or "" when it does not; prev is the line before, which may name
// the document a section at the start of line belongs to.
func (r *repository) checkLine(f, line, prev string) string {
	var why []string
	// Cheap substring tests first: the regular expressions are slow on the
	// long lines of test data, and most lines hold none of these.
	lower := strings.ToLower(line)
	if containsAny(lower, bannedHints) {
		if m := banned.FindString(line); m != "" {
			why = append(why, fmt.Sprintf("cites %q, which the repository does not contain", m))
		}
	}
	if strings.Contains(lower, "issue") {
		if m := issueWord.FindString(line); m != "" {
			why = append(why, fmt.Sprintf("cites tracker %q: give the reason instead", m))
		}
	}
	if strings.Contains(line, "#") {
		if m := issueHash.FindString(line); m != "" {
			why = append(why, fmt.Sprintf("cites tracker %q: give the reason instead", strings.TrimSpace(m)))
		}
	}
	for _, loc := range sectionsOf(line) {
		if w := r.checkSection(f, prev+"\n"+line[:loc[0]], line[loc[2]:loc[3]]); w != "" {
			why = append(why, w)
			break
		}
	}
	prose := line
	if strings.HasSuffix(f, ".go") {
		// In Go, only comments name documents: x.md elsewhere is a field.
		prose = ""
		if loc := goComment.FindStringIndex(line); loc != nil {
			prose = line[loc[1]:]
		}
	}
	if !strings.Contains(prose, ".md") {
		prose = "" // the scan below is slow on long runs of name characters
	}
	for _, loc := range mdName.FindAllStringIndex(prose, -1) {
		if isURL(prose, loc[0], loc[1]) {
			continue
		}
		if w := r.checkMarkdownRef(f, prose[loc[0]:loc[1]], true); w != "" {
			why = append(why, w)
		}
	}
	if strings.HasSuffix(f, ".md") && strings.Contains(line, "](") {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasSuffix(strings.SplitN(target, "#", 2)[0], ".md") {
				continue // URLs are not the repository's; .md names were checked above
			}
			if w := r.checkMarkdownRef(f, target, false); w != "" {
				why = append(why, w)
			}
		}
	}
	return strings.Join(why, "; ")
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func sectionsOf(line string) [][]int {
	if !strings.Contains(line, "§") {
		return nil
	}
	return section.FindAllStringSubmatchIndex(line, -1)
}

// isURL says whether the word holding line[i:j] is a URL.
func isURL(line string, i, j int) bool {
	start := strings.LastIndexAny(line[:i], " \t(<[\"'`") + 1
	end := strings.IndexAny(line[j:], " \t)>]\"'`")
	if end < 0 {
		end = len(line) - j
	}
	return strings.Contains(line[start:j+end], "://")
}

// checkSection checks that the section number sec, with before the text
// before it, belongs to a public standard or to a heading of a repository
// document.
func (r *repository) checkSection(f, before, sec string) string {
	owners := sectionOwner.FindAllString(before, -1)
	if len(owners) == 0 {
		return fmt.Sprintf("§%s names no document: give the reason, or link a heading of a repository doc", sec)
	}
	owner := owners[len(owners)-1]
	if strings.HasPrefix(owner, "RFC") {
		return ""
	}
	doc, ok := r.resolve(f, owner, true)
	if !ok {
		return fmt.Sprintf("§%s of %s, which the repository does not contain", sec, owner)
	}
	if !r.docHeadings(doc)["§"+sec] {
		return fmt.Sprintf("§%s is no numbered heading of %s", sec, doc)
	}
	return ""
}

// checkMarkdownRef checks that ref (a path with an optional #anchor), named
// in file f, exists, and the anchor is a heading of its Markdown file. A
// bare name (named in prose) may be any Markdown file of the repository.
func (r *repository) checkMarkdownRef(f, ref string, bare bool) string {
	target, anchor, _ := strings.Cut(ref, "#")
	doc := f
	if target != "" {
		var ok bool
		if doc, ok = r.resolve(f, target, bare); !ok {
			return fmt.Sprintf("names %s, which the repository does not contain", target)
		}
	}
	if anchor != "" && strings.HasSuffix(doc, ".md") && !r.docHeadings(doc)[anchor] {
		return fmt.Sprintf("links #%s, which is no heading of %s", anchor, doc)
	}
	return ""
}

// resolve finds target, named in file f: relative to f's directory, to the
// repository root, or (for a bare Markdown name without a directory) as
// any Markdown file of that name.
func (r *repository) resolve(f, target string, bare bool) (string, bool) {
	for _, p := range []string{path.Join(path.Dir(f), target), path.Clean(strings.TrimPrefix(target, "/"))} {
		if r.files[p] {
			return p, true
		}
	}
	if bare && !strings.Contains(target, "/") && r.base[target] {
		return target, true
	}
	return "", false
}

var (
	heading         = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	headingNumber   = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)*)\.?\s`)
	anchorDrop      = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
	fencedCodeBlock = regexp.MustCompile("^\\s*(```|~~~)")
)

// docHeadings returns the anchors of doc's headings, as GitHub renders
// them, and "§n" for each heading numbered n.
func (r *repository) docHeadings(doc string) map[string]bool {
	if h, ok := r.headings[doc]; ok {
		return h
	}
	h := map[string]bool{}
	r.headings[doc] = h
	data, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(doc)))
	if err != nil {
		return h
	}
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if fencedCodeBlock.MatchString(line) {
			inCode = !inCode
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inCode || m == nil {
			continue
		}
		if n := headingNumber.FindStringSubmatch(m[1]); n != nil {
			h["§"+n[1]] = true
		}
		a := strings.ReplaceAll(strings.ToLower(anchorDrop.ReplaceAllString(m[1], "")), " ", "-")
		for i, unique := 0, a; ; i++ {
			if !h[unique] {
				h[unique] = true
				break
			}
			unique = fmt.Sprintf("%s-%d", a, i+1)
		}
	}
	return h
}
