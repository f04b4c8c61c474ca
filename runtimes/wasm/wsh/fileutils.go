package wsh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// modeString renders a mode like ls -l ("drwxr-xr-x", "lrwxrwxrwx").
func modeString(m fs.FileMode) string {
	t := byte('-')
	switch {
	case m.IsDir():
		t = 'd'
	case m&fs.ModeSymlink != 0:
		t = 'l'
	case m&fs.ModeNamedPipe != 0:
		t = 'p'
	case m&fs.ModeCharDevice != 0:
		t = 'c'
	case m&fs.ModeDevice != 0:
		t = 'b'
	case m&fs.ModeSocket != 0:
		t = 's'
	}
	return string(t) + m.Perm().String()[1:]
}

// lsUtil is ls [-laA1RdF].
func lsUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "laA1RdFhtrSs", "", map[string]byte{"all": 'a', "recursive": 'R'})
	if !ok {
		return 2
	}
	ops := f.rest
	if len(ops) == 0 {
		ops = []string{"."}
	}
	w := bufio.NewWriter(outWriter{p.stdout})
	defer w.Flush()
	code := 0
	var dirs []string
	for _, op := range ops {
		fi, err := p.sh.stat(p.dir, op, true)
		if err != nil {
			if fi, err = p.sh.stat(p.dir, op, false); err != nil {
				p.errorf("cannot access '%s': %s", op, errText(err))
				code = 2
				continue
			}
		}
		if fi.IsDir() && !f.on['d'] {
			dirs = append(dirs, op)
			continue
		}
		p.lsEntry(w, f, op, op)
	}
	header := len(ops) > 1 || f.on['R']
	for i, d := range dirs {
		if c := p.lsDir(w, f, d, header, i > 0 || len(dirs) < len(ops)); c != 0 {
			code = c
		}
	}
	return code
}

// lsDir lists one directory (recursively with -R).
func (p *proc) lsDir(w *bufio.Writer, f flagSet, dir string, header, blank bool) int {
	ents, err := p.sh.readDir(p.dir, dir)
	if err != nil {
		p.errorf("cannot open directory '%s': %s", dir, errText(err))
		return 2
	}
	if blank {
		w.WriteString("\n")
	}
	if header {
		fmt.Fprintf(w, "%s:\n", dir)
	}
	var names []string
	if f.on['a'] {
		names = append(names, ".", "..")
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") && !f.has("aA") {
			continue
		}
		names = append(names, e.Name())
	}
	if f.on['l'] {
		fmt.Fprintf(w, "total %d\n", len(names))
	}
	for _, n := range names {
		p.lsEntry(w, f, path.Join(dir, n), n)
	}
	code := 0
	if f.on['R'] {
		for _, e := range ents {
			if e.IsDir() && (!strings.HasPrefix(e.Name(), ".") || f.has("aA")) {
				if c := p.lsDir(w, f, joinKeep(dir, e.Name()), true, true); c != 0 {
					code = c
				}
			}
		}
	}
	return code
}

// lsEntry prints one name, long or short.
func (p *proc) lsEntry(w *bufio.Writer, f flagSet, file, shown string) {
	fi, err := p.sh.stat(p.dir, file, false)
	suffix := ""
	if f.on['F'] && err == nil {
		switch {
		case fi.IsDir():
			suffix = "/"
		case fi.Mode()&fs.ModeSymlink != 0:
			suffix = "@"
		case fi.Mode().Perm()&0o111 != 0:
			suffix = "*"
		}
	}
	if !f.on['l'] || err != nil {
		fmt.Fprintf(w, "%s%s\n", shown, suffix)
		return
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if rel, err := p.rel(file, false); err == nil {
			if t, err := p.sh.root.Readlink(rel); err == nil {
				link = " -> " + t
			}
		}
	}
	fmt.Fprintf(w, "%s 1 user user %8d %s %s%s%s\n", modeString(fi.Mode()), fi.Size(),
		fi.ModTime().Format("Jan _2 15:04"), shown, suffix, link)
}

// catUtil is cat [-n] [FILE...].
func catUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "nuA", "", nil)
	if !ok {
		return 1
	}
	out := outWriter{p.stdout}
	line := 0
	return p.inputs(f.rest, func(_ string, r io.Reader) error {
		if !f.on['n'] {
			_, err := io.Copy(out, r)
			return err
		}
		br := bufio.NewReader(r)
		for {
			s, err := br.ReadString('\n')
			if s != "" {
				line++
				if _, werr := fmt.Fprintf(out, "%6d\t%s", line, s); werr != nil {
					return werr
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
}

// countArg normalizes "-5" into "-n 5" for head and tail.
func countArg(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if len(a) > 1 && a[0] == '-' && a[1] >= '0' && a[1] <= '9' {
			out = append(out, "-n", a[1:])
			continue
		}
		out = append(out, a)
	}
	return out
}

// headUtil is head [-n N] [-c N] [FILE...]; it stops reading after N lines.
func headUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(countArg(p.args[1:]), "qv", "nc", map[string]byte{"lines": 'n', "bytes": 'c'})
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(f.val['n'])
	if !f.on['n'] {
		n, err = 10, nil
	}
	c, cerr := strconv.Atoi(f.val['c'])
	if err != nil || (f.on['c'] && cerr != nil) {
		p.errorf("invalid number of lines")
		return 1
	}
	out := outWriter{p.stdout}
	multi := len(f.rest) > 1
	first := true
	return p.inputs(f.rest, func(name string, r io.Reader) error {
		if multi {
			if !first {
				fmt.Fprintln(out)
			}
			fmt.Fprintf(out, "==> %s <==\n", name)
			first = false
		}
		if f.on['c'] {
			_, err := io.CopyN(out, r, int64(c))
			if err == io.EOF {
				return nil
			}
			return err
		}
		br := bufio.NewReader(r)
		for range n {
			s, err := br.ReadString('\n')
			if s != "" {
				if _, werr := io.WriteString(out, s); werr != nil {
					return werr
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// tailUtil is tail [-n N|+N] [-c N] [FILE...].
func tailUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(countArg(p.args[1:]), "qvf", "nc", map[string]byte{"lines": 'n', "bytes": 'c'})
	if !ok {
		return 1
	}
	spec := f.val['n']
	if !f.on['n'] {
		spec = "10"
	}
	from := strings.HasPrefix(spec, "+")
	n, err := strconv.Atoi(strings.TrimPrefix(spec, "+"))
	if err != nil || n < 0 {
		p.errorf("invalid number of lines: '%s'", spec)
		return 1
	}
	out := outWriter{p.stdout}
	return p.inputs(f.rest, func(_ string, r io.Reader) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if f.on['c'] {
			c, _ := strconv.Atoi(f.val['c'])
			_, err = out.Write(b[max(0, len(b)-c):])
			return err
		}
		lines := strings.SplitAfter(string(b), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		var sel []string
		if from {
			sel = lines[min(len(lines), max(n-1, 0)):]
		} else {
			sel = lines[max(0, len(lines)-n):]
		}
		_, err = io.WriteString(out, strings.Join(sel, ""))
		return err
	})
}

// wcUtil is wc [-lwc] [FILE...].
func wcUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "lwcm", "", map[string]byte{"lines": 'l', "words": 'w', "bytes": 'c', "chars": 'm'})
	if !ok {
		return 1
	}
	if !f.has("lwcm") {
		f.on['l'], f.on['w'], f.on['c'] = true, true, true
	}
	type counts struct {
		name    string
		l, w, c int
	}
	var all []counts
	var total counts
	code := p.inputs(f.rest, func(name string, r io.Reader) error {
		c := counts{name: name}
		br := bufio.NewReader(r)
		inWord := false
		for {
			b, err := br.ReadByte()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			c.c++
			if b == '\n' {
				c.l++
			}
			space := b == ' ' || b == '\n' || b == '\t' || b == '\r' || b == '\v' || b == '\f'
			if !space && !inWord {
				c.w++
			}
			inWord = !space
		}
		if name == "-" && len(f.rest) == 0 {
			c.name = ""
		}
		all = append(all, c)
		total.l, total.w, total.c = total.l+c.l, total.w+c.w, total.c+c.c
		return nil
	})
	if len(all) > 1 {
		total.name = "total"
		all = append(all, total)
	}
	cols := 0
	for _, k := range "lwcm" {
		if f.on[byte(k)] {
			cols++
		}
	}
	width := len(strconv.Itoa(total.c))
	switch {
	case cols == 1 && len(all) == 1:
		width = 1
	case len(f.rest) == 0:
		width = 7
	}
	w := bufio.NewWriter(p.stdout)
	for _, c := range all {
		var fields []string
		for _, k := range []struct {
			on bool
			v  int
		}{{f.on['l'], c.l}, {f.on['w'], c.w}, {f.has("cm"), c.c}} {
			if k.on {
				fields = append(fields, fmt.Sprintf("%*d", width, k.v))
			}
		}
		if c.name != "" {
			fields = append(fields, c.name)
		}
		fmt.Fprintln(w, strings.Join(fields, " "))
	}
	w.Flush()
	return code
}

// mkdirUtil is mkdir [-p] [-m MODE] DIR...
func mkdirUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "pv", "m", map[string]byte{"parents": 'p'})
	if !ok {
		return 1
	}
	perm := os.FileMode(0o755)
	if m, err := strconv.ParseUint(f.val['m'], 8, 32); err == nil {
		perm = os.FileMode(m)
	}
	if len(f.rest) == 0 {
		p.errorf("missing operand")
		return 1
	}
	code := 0
	for _, d := range f.rest {
		rel, err := p.rel(d, true)
		if err == nil {
			if f.on['p'] {
				err = p.sh.root.MkdirAll(rel, perm)
			} else {
				err = p.sh.root.Mkdir(rel, perm)
			}
		}
		if err != nil {
			p.errorf("cannot create directory '%s': %s", d, errText(err))
			code = 1
		}
	}
	return code
}

// rmUtil is rm [-rf] FILE...
func rmUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "rRfivd", "", map[string]byte{"recursive": 'r', "force": 'f'})
	if !ok {
		return 1
	}
	if len(f.rest) == 0 && !f.on['f'] {
		p.errorf("missing operand")
		return 1
	}
	code := 0
	for _, name := range f.rest {
		rel, err := p.rel(name, false)
		if err != nil {
			code = p.fail(name, err)
			continue
		}
		if rel == "." || path.Base(name) == "." || path.Base(name) == ".." {
			p.errorf("refusing to remove '.' or '..' or '/' directory: skipping '%s'", name)
			code = 1
			continue
		}
		fi, err := p.sh.root.Lstat(rel)
		if err != nil {
			if !f.on['f'] {
				p.errorf("cannot remove '%s': %s", name, errText(err))
				code = 1
			}
			continue
		}
		if fi.IsDir() && !f.has("rR") {
			if f.on['d'] {
				err = p.sh.root.Remove(rel)
			} else {
				err = errors.New("Is a directory")
			}
		} else if fi.IsDir() {
			err = p.sh.root.RemoveAll(rel)
		} else {
			err = p.sh.root.Remove(rel)
		}
		if err != nil {
			p.errorf("cannot remove '%s': %s", name, errText(err))
			code = 1
		}
	}
	return code
}

// rmdirUtil is rmdir DIR...
func rmdirUtil(_ context.Context, p *proc) int {
	code := 0
	for _, d := range p.args[1:] {
		rel, err := p.rel(d, false)
		if err == nil {
			err = p.sh.root.Remove(rel)
		}
		if err != nil {
			p.errorf("failed to remove '%s': %s", d, errText(err))
			code = 1
		}
	}
	return code
}

// target returns the destination of src when copying or moving into dst:
// dst itself, or dst/base(src) when dst is a directory.
func (p *proc) target(src, dst string, multi bool) (string, error) {
	fi, err := p.sh.stat(p.dir, dst, true)
	if err == nil && fi.IsDir() {
		return path.Join(dst, path.Base(guestAbs(p.dir, src))), nil
	}
	if multi {
		return "", fmt.Errorf("target '%s' is not a directory", dst)
	}
	return dst, nil
}

// cpUtil is cp [-r] SRC... DST.
func cpUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "rRafpvnL", "", map[string]byte{"recursive": 'r', "archive": 'a', "force": 'f'})
	if !ok {
		return 1
	}
	if len(f.rest) < 2 {
		p.errorf("missing file operand")
		return 1
	}
	srcs, dst := f.rest[:len(f.rest)-1], f.rest[len(f.rest)-1]
	code := 0
	for _, src := range srcs {
		to, err := p.target(src, dst, len(srcs) > 1)
		if err != nil {
			p.errorf("%v", err)
			return 1
		}
		sr, err1 := p.rel(src, true)
		dr, err2 := p.rel(to, true)
		if err := errors.Join(err1, err2); err != nil {
			code = p.fail(src, err)
			continue
		}
		fi, err := p.sh.root.Stat(sr)
		if err != nil {
			p.errorf("cannot stat '%s': %s", src, errText(err))
			code = 1
			continue
		}
		if fi.IsDir() {
			if !f.has("rRa") {
				p.errorf("-r not specified; omitting directory '%s'", src)
				code = 1
				continue
			}
			if dr == sr || strings.HasPrefix(dr, sr+"/") || sr == "." {
				p.errorf("cannot copy a directory, '%s', into itself, '%s'", src, to)
				code = 1
				continue
			}
		}
		if err := p.copyTree(sr, dr); err != nil {
			p.errorf("cannot copy '%s' to '%s': %s", src, to, errText(err))
			code = 1
		}
	}
	return code
}

// copyTree copies root-relative src to dst (recursively for directories;
// symlinks inside a tree are copied as symlinks).
func (p *proc) copyTree(src, dst string) error {
	root := p.sh.root
	fi, err := root.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := root.Readlink(src)
		if err != nil {
			return err
		}
		return root.Symlink(t, dst)
	case fi.IsDir():
		if err := root.Mkdir(dst, fi.Mode().Perm()|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		d, err := root.Open(src)
		if err != nil {
			return err
		}
		ents, err := d.ReadDir(-1)
		d.Close()
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := p.copyTree(path.Join(src, e.Name()), path.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	in, err := root.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := root.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// mvUtil is mv SRC... DST.
func mvUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "fivnT", "", map[string]byte{"force": 'f'})
	if !ok {
		return 1
	}
	if len(f.rest) < 2 {
		p.errorf("missing file operand")
		return 1
	}
	srcs, dst := f.rest[:len(f.rest)-1], f.rest[len(f.rest)-1]
	code := 0
	for _, src := range srcs {
		to, err := p.target(src, dst, len(srcs) > 1)
		if err != nil {
			p.errorf("%v", err)
			return 1
		}
		sr, err1 := p.rel(src, false)
		dr, err2 := p.rel(to, false)
		err = errors.Join(err1, err2)
		if err == nil && (sr == "." || strings.HasPrefix(dr, sr+"/")) {
			err = errors.New("Invalid argument")
		}
		if err == nil {
			err = p.sh.root.Rename(sr, dr)
		}
		if err != nil {
			p.errorf("cannot move '%s' to '%s': %s", src, to, errText(err))
			code = 1
		}
	}
	return code
}

// touchUtil is touch [-c] FILE...
func touchUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "cam", "dr", nil)
	if !ok {
		return 1
	}
	code := 0
	now := time.Now()
	for _, name := range f.rest {
		rel, err := p.rel(name, true)
		if err == nil {
			if _, serr := p.sh.root.Stat(rel); serr == nil {
				err = p.sh.root.Chtimes(rel, now, now)
			} else if !f.on['c'] {
				var fh *os.File
				if fh, err = p.sh.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
					err = fh.Close()
				}
			}
		}
		if err != nil {
			p.errorf("cannot touch '%s': %s", name, errText(err))
			code = 1
		}
	}
	return code
}
