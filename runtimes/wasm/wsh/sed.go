package wsh

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// sedAddr is one sed address: a line number, the last line ($) or a regexp.
type sedAddr struct {
	line int // > 0
	last bool
	re   *regexp.Regexp
}

func (a *sedAddr) match(n int, isLast bool, line string) bool {
	switch {
	case a.re != nil:
		return a.re.MatchString(line)
	case a.last:
		return isLast
	}
	return a.line == n
}

// sedCmd is one command of a sed script.
type sedCmd struct {
	a1, a2 *sedAddr
	negate bool
	active bool // inside an a1,a2 range
	op     byte // s p d q
	re     *regexp.Regexp
	repl   string // regexp.Expand template
	global bool
	nth    int
	print  bool
}

// selects reports whether the command applies to line n.
func (c *sedCmd) selects(n int, isLast bool, line string) bool {
	sel := true
	switch {
	case c.a1 == nil:
	case c.a2 == nil:
		sel = c.a1.match(n, isLast, line)
	case c.active:
		if c.a2.match(n, isLast, line) || (c.a2.line > 0 && n >= c.a2.line) {
			c.active = false
		}
	default:
		sel = c.a1.match(n, isLast, line)
		if sel {
			c.active = !(c.a2.line > 0 && c.a2.line <= n)
		}
	}
	return sel != c.negate
}

// sedParser parses a sed script.
type sedParser struct {
	s        string
	i        int
	extended bool
}

func (sp *sedParser) errorf(format string, a ...any) error {
	return fmt.Errorf("-e expression #1, char %d: %s", sp.i, fmt.Sprintf(format, a...))
}

// delimited reads up to the unescaped delimiter d (consumed).
func (sp *sedParser) delimited(d byte) (string, error) {
	var b strings.Builder
	for sp.i < len(sp.s) {
		c := sp.s[sp.i]
		sp.i++
		switch {
		case c == '\\' && sp.i < len(sp.s):
			n := sp.s[sp.i]
			sp.i++
			if n == d {
				b.WriteByte(d)
			} else if n == 'n' {
				b.WriteString(`\n`)
			} else {
				b.WriteByte('\\')
				b.WriteByte(n)
			}
		case c == d:
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	return "", sp.errorf("unterminated `s' command")
}

func (sp *sedParser) regexp(pat string) (*regexp.Regexp, error) {
	re, err := compileRE(pat, sp.extended, false, false)
	if err != nil {
		return nil, sp.errorf("invalid regular expression: %v", err)
	}
	return re, nil
}

func (sp *sedParser) addr() (*sedAddr, error) {
	if sp.i >= len(sp.s) {
		return nil, nil
	}
	switch c := sp.s[sp.i]; {
	case c == '$':
		sp.i++
		return &sedAddr{last: true}, nil
	case c >= '0' && c <= '9':
		j := sp.i
		for sp.i < len(sp.s) && sp.s[sp.i] >= '0' && sp.s[sp.i] <= '9' {
			sp.i++
		}
		n, _ := strconv.Atoi(sp.s[j:sp.i])
		return &sedAddr{line: n}, nil
	case c == '/':
		sp.i++
		pat, err := sp.delimited('/')
		if err != nil {
			return nil, err
		}
		re, err := sp.regexp(pat)
		return &sedAddr{re: re}, err
	}
	return nil, nil
}

func (sp *sedParser) skipBlank() {
	for sp.i < len(sp.s) && (sp.s[sp.i] == ' ' || sp.s[sp.i] == '\t') {
		sp.i++
	}
}

// parse parses the whole script.
func (sp *sedParser) parse() ([]*sedCmd, error) {
	var cmds []*sedCmd
	for {
		for sp.i < len(sp.s) && strings.IndexByte(" \t\n;", sp.s[sp.i]) >= 0 {
			sp.i++
		}
		if sp.i >= len(sp.s) {
			return cmds, nil
		}
		c := &sedCmd{}
		var err error
		if c.a1, err = sp.addr(); err != nil {
			return nil, err
		}
		if c.a1 != nil && sp.i < len(sp.s) && sp.s[sp.i] == ',' {
			sp.i++
			if c.a2, err = sp.addr(); err != nil || c.a2 == nil {
				return nil, sp.errorf("unexpected `,'")
			}
		}
		sp.skipBlank()
		if sp.i < len(sp.s) && sp.s[sp.i] == '!' {
			c.negate = true
			sp.i++
			sp.skipBlank()
		}
		if sp.i >= len(sp.s) {
			return nil, sp.errorf("missing command")
		}
		c.op = sp.s[sp.i]
		sp.i++
		switch c.op {
		case 'p', 'd', 'q', '=':
		case 's':
			if err := sp.subst(c); err != nil {
				return nil, err
			}
		default:
			return nil, sp.errorf("unknown command: `%c'", c.op)
		}
		cmds = append(cmds, c)
	}
}

// subst parses the rest of an s command.
func (sp *sedParser) subst(c *sedCmd) error {
	if sp.i >= len(sp.s) {
		return sp.errorf("unterminated `s' command")
	}
	d := sp.s[sp.i]
	sp.i++
	pat, err := sp.delimited(d)
	if err != nil {
		return err
	}
	repl, err := sp.delimited(d)
	if err != nil {
		return err
	}
	c.repl = sedTemplate(repl)
	icase := false
	for sp.i < len(sp.s) && strings.IndexByte(" \t\n;}", sp.s[sp.i]) < 0 {
		f := sp.s[sp.i]
		sp.i++
		switch {
		case f == 'g':
			c.global = true
		case f == 'p':
			c.print = true
		case f == 'i' || f == 'I':
			icase = true
		case f >= '0' && f <= '9':
			c.nth = c.nth*10 + int(f-'0')
		default:
			return sp.errorf("unknown option to `s'")
		}
	}
	if icase {
		pat = "(?i)" + pat
	}
	c.re, err = sp.regexp(pat)
	return err
}

// sedTemplate converts a sed replacement into a regexp.Expand template.
func sedTemplate(r string) string {
	var b strings.Builder
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == '$':
			b.WriteString("$$")
		case c == '&':
			b.WriteString("${0}")
		case c == '\\' && i+1 < len(r):
			i++
			switch n := r[i]; {
			case n >= '0' && n <= '9':
				fmt.Fprintf(&b, "${%c}", n)
			case n == 'n':
				b.WriteByte('\n')
			case n == 't':
				b.WriteByte('\t')
			case n == '$':
				b.WriteString("$$")
			default:
				b.WriteByte(n)
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// apply runs an s command on line, reporting whether it substituted.
func (c *sedCmd) apply(line string) (string, bool) {
	ms := c.re.FindAllStringSubmatchIndex(line, -1)
	nth := max(c.nth, 1)
	var b []byte
	last, done := 0, false
	for i, m := range ms {
		if i+1 < nth || (done && !c.global) {
			continue
		}
		b = append(b, line[last:m[0]]...)
		b = c.re.ExpandString(b, c.repl, line, m)
		last, done = m[1], true
	}
	if !done {
		return line, false
	}
	return string(append(b, line[last:]...)), true
}

// run runs the script over input and writes the result.
func sedRun(cmds []*sedCmd, input string, quiet bool, w io.Writer) error {
	trailing := strings.HasSuffix(input, "\n")
	lines := strings.Split(strings.TrimSuffix(input, "\n"), "\n")
	if input == "" {
		lines = nil
	}
	var out strings.Builder
	emit := func(s string) { out.WriteString(s); out.WriteByte('\n') }
	quit := false
	for n, line := range lines {
		isLast := n == len(lines)-1
		deleted := false
		for _, c := range cmds {
			if !c.selects(n+1, isLast, line) {
				continue
			}
			switch c.op {
			case 'p':
				emit(line)
			case '=':
				emit(strconv.Itoa(n + 1))
			case 'd':
				deleted = true
			case 'q':
				quit = true
			case 's':
				var did bool
				if line, did = c.apply(line); did && c.print {
					emit(line)
				}
			}
			if deleted || quit {
				break
			}
		}
		if !deleted && !quiet {
			emit(line)
		}
		if quit {
			break
		}
	}
	s := out.String()
	if !trailing && !quit && strings.HasSuffix(s, "\n") && len(lines) > 0 {
		s = s[:len(s)-1]
	}
	_, err := io.WriteString(w, s)
	return err
}

// sedUtil is sed [-n] [-E|-r] [-i] [-e SCRIPT]... [SCRIPT] [FILE...]:
// s///[gpiN], p, d, q and = with line, $ and /re/ addresses and ranges.
func sedUtil(_ context.Context, p *proc) int {
	var scripts, rest []string
	quiet, extended, inPlace := false, false, false
	args := p.args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-e" || a == "--expression":
			if i+1 >= len(args) {
				p.errorf("option requires an argument -- 'e'")
				return 1
			}
			i++
			scripts = append(scripts, args[i])
		case a == "--":
			rest = append(rest, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-i") || strings.HasPrefix(a, "--in-place"):
			inPlace = true
		case len(a) > 1 && a[0] == '-' && strings.Trim(a[1:], "nErsu") == "":
			quiet = quiet || strings.Contains(a, "n")
			extended = extended || strings.ContainsAny(a, "Er")
		case len(a) > 1 && a[0] == '-':
			p.errorf("invalid option -- '%s'", a[1:])
			return 1
		default:
			rest = append(rest, a)
		}
	}
	if len(scripts) == 0 {
		if len(rest) == 0 {
			p.errorf("no script specified")
			return 1
		}
		scripts, rest = rest[:1], rest[1:]
	}
	sp := &sedParser{s: strings.Join(scripts, "\n"), extended: extended}
	cmds, err := sp.parse()
	if err != nil {
		p.errorf("%v", err)
		return 1
	}
	if !inPlace {
		var all strings.Builder
		code := p.inputs(rest, func(_ string, r io.Reader) error {
			_, err := io.Copy(&all, r)
			return err
		})
		if err := sedRun(cmds, all.String(), quiet, p.stdout); err != nil {
			return 4
		}
		return code
	}
	if len(rest) == 0 {
		p.errorf("no input files")
		return 1
	}
	code := 0
	for _, name := range rest {
		rel, err := p.rel(name, true)
		var b []byte
		if err == nil {
			b, err = p.sh.root.ReadFile(rel)
		}
		if err != nil {
			code = p.fail(name, err)
			continue
		}
		fi, err := p.sh.root.Stat(rel)
		if err != nil {
			code = p.fail(name, err)
			continue
		}
		var out strings.Builder
		for _, c := range cmds {
			c.active = false
		}
		_ = sedRun(cmds, string(b), quiet, &out)
		if err := p.sh.root.WriteFile(rel, []byte(out.String()), fi.Mode().Perm()); err != nil {
			code = p.fail(name, err)
		}
	}
	return code
}
