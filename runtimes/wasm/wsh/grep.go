package wsh

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
)

// breToERE converts a POSIX basic regular expression to the extended
// syntax of Go's regexp: \( \) \{ \} \| \+ \? become operators and their
// bare forms literals; \< and \> become word boundaries.
func breToERE(s string) string {
	var b strings.Builder
	inBracket := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inBracket {
			b.WriteByte(c)
			if c == ']' {
				inBracket = false
			}
			continue
		}
		switch c {
		case '[':
			inBracket = true
			b.WriteByte(c)
			if i+1 < len(s) && s[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(s) && s[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
		case '\\':
			if i+1 == len(s) {
				b.WriteString(`\\`)
				continue
			}
			i++
			switch n := s[i]; n {
			case '(', ')', '{', '}', '|', '+', '?':
				b.WriteByte(n)
			case '<', '>':
				b.WriteString(`\b`)
			default:
				b.WriteByte('\\')
				b.WriteByte(n)
			}
		case '(', ')', '{', '}', '|', '+', '?':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ereToGo adapts an extended regular expression (word boundaries).
func ereToGo(s string) string {
	return strings.NewReplacer(`\<`, `\b`, `\>`, `\b`).Replace(s)
}

// compileRE compiles a grep/sed pattern.
func compileRE(pat string, extended, fixed, icase bool) (*regexp.Regexp, error) {
	switch {
	case fixed:
		pat = regexp.QuoteMeta(pat)
	case extended:
		pat = ereToGo(pat)
	default:
		pat = breToERE(pat)
	}
	if icase {
		pat = "(?i)" + pat
	}
	return regexp.Compile(pat)
}

// grepUtil is grep [-ivncrRElLqswxoFhH] [-e PAT] PAT [FILE...].
func grepUtil(ctx context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "ivncrREFlLqswxohHaI", "em", map[string]byte{
		"ignore-case": 'i', "invert-match": 'v', "line-number": 'n', "count": 'c',
		"recursive": 'r', "extended-regexp": 'E', "fixed-strings": 'F', "files-with-matches": 'l',
		"quiet": 'q', "silent": 'q', "word-regexp": 'w', "line-regexp": 'x', "only-matching": 'o',
		"no-filename": 'h', "with-filename": 'H', "regexp": 'e', "max-count": 'm',
	})
	if !ok {
		return 2
	}
	files := f.rest
	pat := strings.Join(f.vals['e'], "\n") // each -e is one more pattern
	if !f.on['e'] {
		if len(files) == 0 {
			p.errorf("no pattern given")
			return 2
		}
		pat, files = files[0], files[1:]
	}
	extended := f.on['E'] || p.name() == "egrep"
	fixed := f.on['F'] || p.name() == "fgrep"
	alts := strings.Split(pat, "\n")
	for i, a := range alts {
		if fixed {
			a = regexp.QuoteMeta(a)
		} else if extended {
			a = ereToGo(a)
		} else {
			a = breToERE(a)
		}
		alts[i] = "(?:" + a + ")"
	}
	expr := strings.Join(alts, "|")
	if f.on['w'] {
		expr = `\b(?:` + expr + `)\b`
	}
	if f.on['x'] {
		expr = `^(?:` + expr + `)$`
	}
	if f.on['i'] {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		p.errorf("invalid regular expression: %v", err)
		return 2
	}
	maxCount := -1
	if f.on['m'] {
		maxCount, _ = strconv.Atoi(f.val['m'])
	}
	recursive := f.has("rR")
	implicitDot := recursive && len(files) == 0
	if implicitDot {
		files = []string{"."}
	}
	showName := (len(files) > 1 || recursive) && !f.on['h'] || f.on['H']
	w := bufio.NewWriter(outWriter{p.stdout})
	defer w.Flush()
	matched, failed := false, false
	grepOne := func(name string, r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
		count, lineNo := 0, 0
		for sc.Scan() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lineNo++
			line := sc.Text()
			hit := re.MatchString(line) != f.on['v']
			if !hit {
				continue
			}
			count++
			matched = true
			if f.on['q'] {
				return nil
			}
			if f.has("lLc") {
				if maxCount >= 0 && count >= maxCount {
					break
				}
				continue
			}
			prefix := ""
			if showName {
				prefix = name + ":"
			}
			if f.on['n'] {
				prefix += strconv.Itoa(lineNo) + ":"
			}
			if f.on['o'] && !f.on['v'] {
				for _, m := range re.FindAllString(line, -1) {
					if m != "" {
						fmt.Fprintf(w, "%s%s\n", prefix, m)
					}
				}
			} else {
				fmt.Fprintf(w, "%s%s\n", prefix, line)
			}
			if maxCount >= 0 && count >= maxCount {
				break
			}
		}
		switch {
		case f.on['c']:
			if showName {
				fmt.Fprintf(w, "%s:", name)
			}
			fmt.Fprintln(w, count)
		case f.on['l'] && count > 0, f.on['L'] && count == 0:
			fmt.Fprintln(w, name)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		return sc.Err()
	}
	for _, name := range files {
		if f.on['q'] && matched {
			break
		}
		if recursive {
			failed = p.grepTree(name, implicitDot, grepOne, f.on['s']) || failed
			continue
		}
		if code := p.inputs([]string{name}, grepOne); code != 0 {
			failed = true
		}
	}
	if len(files) == 0 {
		if code := p.inputs(nil, grepOne); code != 0 {
			failed = true
		}
	}
	switch {
	case matched && (f.on['q'] || !failed):
		return 0
	case failed:
		return 2
	}
	return 1
}

// grepTree greps every regular file under name; it reports failures.
// With bare set, name is the implicit "." and is left out of printed paths.
func (p *proc) grepTree(name string, bare bool, fn func(string, io.Reader) error, quiet bool) bool {
	fi, err := p.sh.stat(p.dir, name, true)
	if err != nil {
		if !quiet {
			p.errorf("%s: %s", name, errText(err))
		}
		return true
	}
	if !fi.IsDir() {
		return p.inputs([]string{name}, fn) != 0
	}
	ents, err := p.sh.readDir(p.dir, name)
	failed := err != nil
	for _, e := range ents {
		child := joinKeep(name, e.Name())
		if bare {
			child = e.Name()
		}
		switch {
		case e.IsDir():
			failed = p.grepTree(child, false, fn, quiet) || failed
		case e.Type()&fs.ModeSymlink == 0:
			failed = p.inputs([]string{child}, fn) != 0 || failed
		}
	}
	return failed
}
