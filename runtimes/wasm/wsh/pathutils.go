package wsh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// fileType names a file's type like stat(1).
func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeDevice != 0:
		return "character special file"
	}
	return "regular file"
}

// statUtil is stat [-L] [-c FORMAT] FILE... (%n %s %a %A %F %Y %y %U %G %u %g).
func statUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "Lt", "c", map[string]byte{"format": 'c', "dereference": 'L'})
	if !ok {
		return 1
	}
	code := 0
	for _, name := range f.rest {
		fi, err := p.sh.stat(p.dir, name, f.on['L'])
		if err != nil {
			p.errorf("cannot stat '%s': %s", name, errText(err))
			code = 1
			continue
		}
		if f.on['c'] {
			fmt.Fprintln(p.stdout, statFormat(f.val['c'], name, fi))
			continue
		}
		fmt.Fprintf(p.stdout, "  File: %s\n  Size: %d\tBlocks: %d\tIO Block: 4096\t%s\n", name, fi.Size(), (fi.Size()+511)/512, fileType(fi.Mode()))
		fmt.Fprintf(p.stdout, "Access: (%04o/%s)  Uid: ( 1000/    user)   Gid: ( 1000/    user)\n", fi.Mode().Perm(), modeString(fi.Mode()))
		fmt.Fprintf(p.stdout, "Modify: %s\n", fi.ModTime().Format("2006-01-02 15:04:05.000000000 -0700"))
	}
	return code
}

// statFormat expands a stat -c format.
func statFormat(format, name string, fi fs.FileInfo) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'n':
			b.WriteString(name)
		case 's':
			b.WriteString(strconv.FormatInt(fi.Size(), 10))
		case 'a':
			fmt.Fprintf(&b, "%o", fi.Mode().Perm())
		case 'A':
			b.WriteString(modeString(fi.Mode()))
		case 'F':
			b.WriteString(fileType(fi.Mode()))
		case 'Y':
			b.WriteString(strconv.FormatInt(fi.ModTime().Unix(), 10))
		case 'y':
			b.WriteString(fi.ModTime().Format("2006-01-02 15:04:05.000000000 -0700"))
		case 'U', 'G':
			b.WriteString("user")
		case 'u', 'g':
			b.WriteString("1000")
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// chmodUtil is chmod [-R] MODE FILE... (octal or symbolic like u+x,go-w).
func chmodUtil(_ context.Context, p *proc) int {
	args := p.args[1:]
	recursive := false
	for len(args) > 0 && (args[0] == "-R" || args[0] == "-v" || args[0] == "-f") {
		recursive = recursive || args[0] == "-R"
		args = args[1:]
	}
	if len(args) < 2 {
		p.errorf("missing operand")
		return 1
	}
	mode := args[0]
	code := 0
	var apply func(rel string) error
	apply = func(rel string) error {
		fi, err := p.sh.root.Stat(rel)
		if err != nil {
			return err
		}
		m, err := chmodMode(mode, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if err := p.sh.root.Chmod(rel, m); err != nil {
			return err
		}
		if recursive && fi.IsDir() {
			d, err := p.sh.root.Open(rel)
			if err != nil {
				return err
			}
			ents, err := d.ReadDir(-1)
			d.Close()
			for _, e := range ents {
				if e.Type()&fs.ModeSymlink == 0 {
					err = errors.Join(err, apply(path.Join(rel, e.Name())))
				}
			}
			return err
		}
		return nil
	}
	for _, name := range args[1:] {
		rel, err := p.rel(name, true)
		if err == nil {
			err = apply(rel)
		}
		if err != nil {
			p.errorf("changing permissions of '%s': %s", name, errText(err))
			code = 1
		}
	}
	return code
}

// chmodMode computes the new permission bits from a chmod mode string.
func chmodMode(spec string, cur fs.FileMode) (fs.FileMode, error) {
	if n, err := strconv.ParseUint(spec, 8, 32); err == nil {
		return fs.FileMode(n) & fs.ModePerm, nil
	}
	m := cur
	for _, clause := range strings.Split(spec, ",") {
		i := strings.IndexAny(clause, "+-=")
		if i < 0 {
			return 0, fmt.Errorf("invalid mode: '%s'", spec)
		}
		who, op, perms := clause[:i], clause[i], clause[i+1:]
		var mask fs.FileMode
		if who == "" || strings.Contains(who, "a") {
			mask = 0o777
		}
		for _, c := range who {
			switch c {
			case 'u':
				mask |= 0o700
			case 'g':
				mask |= 0o070
			case 'o':
				mask |= 0o007
			case 'a':
			default:
				return 0, fmt.Errorf("invalid mode: '%s'", spec)
			}
		}
		var bits fs.FileMode
		for _, c := range perms {
			switch c {
			case 'r':
				bits |= 0o444
			case 'w':
				bits |= 0o222
			case 'x', 'X':
				bits |= 0o111
			default:
				return 0, fmt.Errorf("invalid mode: '%s'", spec)
			}
		}
		bits &= mask
		switch op {
		case '+':
			m |= bits
		case '-':
			m &^= bits
		case '=':
			m = m&^mask | bits
		}
	}
	return m, nil
}

// lnUtil is ln [-s] [-f] TARGET LINK (hard links without -s).
func lnUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "sfnvT", "", map[string]byte{"symbolic": 's', "force": 'f'})
	if !ok {
		return 1
	}
	if len(f.rest) < 1 {
		p.errorf("missing file operand")
		return 1
	}
	target := f.rest[0]
	link := path.Base(target)
	if len(f.rest) > 1 {
		link = f.rest[1]
	}
	if fi, err := p.sh.stat(p.dir, link, !f.on['n']); err == nil && fi.IsDir() {
		link = path.Join(link, path.Base(target))
	}
	lr, err := p.rel(link, false)
	if err == nil && f.on['f'] {
		_ = p.sh.root.Remove(lr)
	}
	if err == nil {
		if f.on['s'] {
			err = p.sh.root.Symlink(target, lr)
		} else {
			var tr string
			if tr, err = p.rel(target, true); err == nil {
				err = p.sh.root.Link(tr, lr)
			}
		}
	}
	if err != nil {
		p.errorf("failed to create link '%s': %s", link, errText(err))
		return 1
	}
	return 0
}

// realpathUtil prints resolved absolute guest paths.
func realpathUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "emsq", "", nil)
	if !ok {
		return 1
	}
	code := 0
	for _, name := range f.rest {
		if c := p.printResolved(name, f.on['e']); c != 0 {
			code = c
		}
	}
	return code
}

// printResolved prints the canonical guest path of name; with mustExist
// the file itself must exist, otherwise its parent must.
func (p *proc) printResolved(name string, mustExist bool) int {
	rel, err := p.rel(name, true)
	if err == nil {
		probe := rel
		if !mustExist {
			probe = path.Dir(rel)
		}
		_, err = p.sh.root.Stat(probe)
	}
	if err != nil {
		return p.fail(name, err)
	}
	fmt.Fprintln(p.stdout, guestAbs("/", rel))
	return 0
}

// readlinkUtil is readlink [-f] FILE...
func readlinkUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "femnqsv", "", nil)
	if !ok {
		return 1
	}
	code := 0
	for _, name := range f.rest {
		if f.has("fem") {
			if c := p.printResolved(name, f.on['e']); c != 0 {
				code = c
			}
			continue
		}
		rel, err := p.rel(name, false)
		var t string
		if err == nil {
			t, err = p.sh.root.Readlink(rel)
		}
		if err != nil {
			code = 1
			continue
		}
		fmt.Fprintln(p.stdout, t)
	}
	return code
}

// basenameUtil is basename NAME [SUFFIX].
func basenameUtil(_ context.Context, p *proc) int {
	args := p.args[1:]
	if len(args) == 0 {
		p.errorf("missing operand")
		return 1
	}
	b := path.Base(args[0])
	if len(args) > 1 && b != args[1] {
		b = strings.TrimSuffix(b, args[1])
	}
	fmt.Fprintln(p.stdout, b)
	return 0
}

// dirnameUtil is dirname NAME...
func dirnameUtil(_ context.Context, p *proc) int {
	if len(p.args) < 2 {
		p.errorf("missing operand")
		return 1
	}
	for _, a := range p.args[1:] {
		fmt.Fprintln(p.stdout, path.Dir(a))
	}
	return 0
}

// findUtil is find [PATH...] [-name P] [-iname P] [-type f|d|l]
// [-maxdepth N] [-mindepth N] [-path P] [-print].
func findUtil(ctx context.Context, p *proc) int {
	args := p.args[1:]
	var roots []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "!" {
		roots = append(roots, args[0])
		args = args[1:]
	}
	if len(roots) == 0 {
		roots = []string{"."}
	}
	type test func(pth string, fi fs.FileInfo) bool
	var tests []test
	maxDepth, minDepth := -1, 0
	for len(args) > 0 {
		a := args[0]
		args = args[1:]
		if a == "-print" {
			continue
		}
		if len(args) == 0 {
			p.errorf("missing argument to '%s'", a)
			return 1
		}
		v := args[0]
		args = args[1:]
		switch a {
		case "-name", "-iname", "-path", "-wholename":
			ci := a == "-iname"
			whole := a == "-path" || a == "-wholename"
			if _, err := path.Match(v, ""); err != nil {
				p.errorf("invalid pattern '%s'", v)
				return 1
			}
			tests = append(tests, func(pth string, _ fs.FileInfo) bool {
				s, pat := path.Base(pth), v
				if whole {
					s = pth
				}
				if ci {
					s, pat = strings.ToLower(s), strings.ToLower(pat)
				}
				ok, _ := path.Match(pat, s)
				return ok
			})
		case "-type":
			tests = append(tests, func(_ string, fi fs.FileInfo) bool {
				switch v {
				case "f":
					return fi.Mode().IsRegular()
				case "d":
					return fi.IsDir()
				case "l":
					return fi.Mode()&fs.ModeSymlink != 0
				}
				return false
			})
		case "-maxdepth", "-mindepth":
			n, err := strconv.Atoi(v)
			if err != nil {
				p.errorf("invalid argument '%s' to '%s'", v, a)
				return 1
			}
			if a == "-maxdepth" {
				maxDepth = n
			} else {
				minDepth = n
			}
		default:
			p.errorf("unknown predicate '%s'", a)
			return 1
		}
	}
	w := bufio.NewWriter(outWriter{p.stdout})
	defer w.Flush()
	code := 0
	var walk func(pth string, depth int) bool
	walk = func(pth string, depth int) bool {
		if ctx.Err() != nil {
			return false
		}
		fi, err := p.sh.stat(p.dir, pth, depth == 0)
		if err != nil {
			p.errorf("'%s': %s", pth, errText(err))
			code = 1
			return true
		}
		match := depth >= minDepth
		for _, t := range tests {
			match = match && t(pth, fi)
		}
		if match {
			if _, err := fmt.Fprintln(w, pth); err != nil {
				return false
			}
		}
		if fi.IsDir() && (maxDepth < 0 || depth < maxDepth) {
			ents, err := p.sh.readDir(p.dir, pth)
			if err != nil {
				p.errorf("'%s': %s", pth, errText(err))
				code = 1
			}
			for _, e := range ents {
				if !walk(joinKeep(pth, e.Name()), depth+1) {
					return false
				}
			}
		}
		return true
	}
	for _, r := range roots {
		if !walk(r, 0) {
			break
		}
	}
	return code
}

// joinKeep joins a directory operand and a name the way find and ls print
// them: "." + "a" is "./a", not "a".
func joinKeep(dir, name string) string {
	return strings.TrimSuffix(dir, "/") + "/" + name
}
