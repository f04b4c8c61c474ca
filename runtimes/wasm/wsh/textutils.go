package wsh

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// readLines reads all lines of the inputs (without their newlines).
func (p *proc) readLines(files []string) ([]string, int) {
	var lines []string
	code := p.inputs(files, func(_ string, r io.Reader) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		s := strings.TrimSuffix(string(b), "\n")
		if len(b) > 0 {
			lines = append(lines, strings.Split(s, "\n")...)
		}
		return nil
	})
	return lines, code
}

// writeLines writes lines, each followed by a newline.
func (p *proc) writeLines(lines []string) int {
	w := bufio.NewWriter(outWriter{p.stdout})
	for _, l := range lines {
		w.WriteString(l)
		w.WriteByte('\n')
	}
	if w.Flush() != nil {
		return 1
	}
	return 0
}

// sortUtil is sort [-rnufb] [-k N[,M]] [-t SEP] [FILE...].
func sortUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "rnufbsVh", "kto", map[string]byte{
		"reverse": 'r', "numeric-sort": 'n', "unique": 'u', "ignore-case": 'f', "key": 'k', "field-separator": 't',
	})
	if !ok {
		return 2
	}
	lines, code := p.readLines(f.rest)
	if code != 0 {
		return 2
	}
	numeric := f.has("nh")
	field, endField := 0, 0
	if k := f.val['k']; k != "" {
		start, end, _ := strings.Cut(k, ",")
		trim := func(s string) string {
			s, _, _ = strings.Cut(s, ".")
			if strings.ContainsAny(s, "n") {
				numeric = true
			}
			return strings.TrimRight(s, "bdfgihnMRrV")
		}
		field, _ = strconv.Atoi(trim(start))
		endField, _ = strconv.Atoi(trim(end))
	}
	sep := f.val['t']
	key := func(l string) string {
		if field > 0 {
			var fs []string
			if sep != "" {
				fs = strings.Split(l, sep)
			} else {
				fs = strings.Fields(l)
			}
			if field > len(fs) {
				return ""
			}
			last := len(fs)
			if endField >= field && endField < last {
				last = endField
			}
			j := sep
			if j == "" {
				j = " "
			}
			l = strings.Join(fs[field-1:last], j)
		}
		if f.on['b'] {
			l = strings.TrimLeft(l, " \t")
		}
		if f.on['f'] {
			l = strings.ToLower(l)
		}
		return l
	}
	cmp := func(a, b string) int {
		ka, kb := key(a), key(b)
		if numeric {
			if c := compareFloat(leadingNumber(ka), leadingNumber(kb)); c != 0 {
				return c
			}
			if f.on['u'] {
				return 0
			}
		}
		return strings.Compare(ka, kb)
	}
	slices.SortStableFunc(lines, func(a, b string) int {
		c := cmp(a, b)
		if c == 0 && !f.on['u'] && !f.on['s'] {
			c = strings.Compare(a, b)
		}
		if f.on['r'] {
			return -c
		}
		return c
	})
	if f.on['u'] {
		lines = slices.CompactFunc(lines, func(a, b string) bool { return cmp(a, b) == 0 })
	}
	return p.writeLines(lines)
}

// leadingNumber parses the number at the start of s (0 when none).
func leadingNumber(s string) float64 {
	s = strings.TrimSpace(s)
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' || (end == 0 && (s[end] == '-' || s[end] == '+'))) {
		end++
	}
	n, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0
	}
	return n
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// uniqUtil is uniq [-cdui] [INPUT].
func uniqUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "cdui", "", map[string]byte{"count": 'c', "repeated": 'd', "unique": 'u', "ignore-case": 'i'})
	if !ok {
		return 1
	}
	lines, code := p.readLines(f.rest[:min(1, len(f.rest))])
	if code != 0 {
		return code
	}
	eq := func(a, b string) bool {
		if f.on['i'] {
			return strings.EqualFold(a, b)
		}
		return a == b
	}
	var out []string
	for i := 0; i < len(lines); {
		j := i + 1
		for j < len(lines) && eq(lines[i], lines[j]) {
			j++
		}
		n := j - i
		if (!f.on['d'] || n > 1) && (!f.on['u'] || n == 1) {
			if f.on['c'] {
				out = append(out, fmt.Sprintf("%7d %s", n, lines[i]))
			} else {
				out = append(out, lines[i])
			}
		}
		i = j
	}
	return p.writeLines(out)
}

// trSet expands a tr set: ranges, escapes and [:class:] names.
func trSet(s string) []rune {
	classes := map[string]func(rune) bool{
		"upper": func(r rune) bool { return r >= 'A' && r <= 'Z' },
		"lower": func(r rune) bool { return r >= 'a' && r <= 'z' },
		"digit": func(r rune) bool { return r >= '0' && r <= '9' },
		"alpha": func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' },
		"alnum": func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' },
		"space": func(r rune) bool { return strings.ContainsRune(" \t\n\r\v\f", r) },
		"blank": func(r rune) bool { return r == ' ' || r == '\t' },
		"punct": func(r rune) bool {
			return r > 32 && r < 127 && !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		},
	}
	var in []rune
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		if rs[i] == '[' && i+1 < len(rs) && rs[i+1] == ':' {
			if end := strings.Index(string(rs[i:]), ":]"); end > 0 {
				name := string(rs[i+2 : i+end])
				if fn, ok := classes[name]; ok {
					for r := rune(0); r < 128; r++ {
						if fn(r) {
							in = append(in, r)
						}
					}
					i += len([]rune(string(rs[i:i+end]))) + 1
					continue
				}
			}
		}
		r := rs[i]
		if r == '\\' && i+1 < len(rs) {
			i++
			switch rs[i] {
			case 'n':
				r = '\n'
			case 't':
				r = '\t'
			case 'r':
				r = '\r'
			default:
				r = rs[i]
			}
		}
		if i+2 < len(rs) && rs[i+1] == '-' {
			for c := r; c <= rs[i+2]; c++ {
				in = append(in, c)
			}
			i += 2
			continue
		}
		in = append(in, r)
	}
	return in
}

// trUtil is tr [-ds] [-c] SET1 [SET2].
func trUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "dscC", "", nil)
	if !ok {
		return 1
	}
	if len(f.rest) < 1 || (len(f.rest) < 2 && !f.has("ds")) {
		p.errorf("missing operand")
		return 1
	}
	set1 := trSet(f.rest[0])
	var set2 []rune
	if len(f.rest) > 1 {
		set2 = trSet(f.rest[1])
	}
	in1 := func(r rune) bool { return slices.Contains(set1, r) != f.has("cC") }
	mapping := map[rune]rune{}
	if !f.on['d'] && len(set2) > 0 {
		for i, r := range set1 {
			mapping[r] = set2[min(i, len(set2)-1)]
		}
	}
	squeeze := set1
	if len(set2) > 0 {
		squeeze = set2
	}
	b, err := io.ReadAll(p.stdin)
	if err != nil {
		return 1
	}
	var out strings.Builder
	last, haveLast := rune(0), false
	for _, r := range string(b) {
		if f.on['d'] && in1(r) {
			continue
		}
		if m, ok := mapping[r]; ok {
			r = m
		} else if f.has("cC") && !f.on['d'] && len(set2) > 0 && in1(r) {
			r = set2[len(set2)-1]
		}
		if f.on['s'] && haveLast && r == last && slices.Contains(squeeze, r) {
			continue
		}
		out.WriteRune(r)
		last, haveLast = r, true
	}
	if _, err := io.WriteString(p.stdout, out.String()); err != nil {
		return 1
	}
	return 0
}

// parseList parses a cut list ("1,3", "2-", "-3") into a predicate.
func parseList(s string) (func(int) bool, error) {
	type span struct{ lo, hi int }
	var spans []span
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		var sp span
		var err error
		if sp.lo, err = strconv.Atoi(lo); lo == "" {
			sp.lo, err = 1, nil
		}
		if err != nil {
			return nil, err
		}
		sp.hi = sp.lo
		if isRange {
			if hi == "" {
				sp.hi = math.MaxInt
			} else if sp.hi, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		spans = append(spans, sp)
	}
	return func(i int) bool {
		for _, sp := range spans {
			if i >= sp.lo && i <= sp.hi {
				return true
			}
		}
		return false
	}, nil
}

// cutUtil is cut -f LIST [-d DELIM] [-s] | -c LIST | -b LIST [FILE...].
func cutUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "s", "fcbd", map[string]byte{"fields": 'f', "delimiter": 'd', "characters": 'c', "bytes": 'b'})
	if !ok {
		return 1
	}
	spec, mode := f.val['f'], 'f'
	if f.on['c'] || f.on['b'] {
		spec, mode = f.val['c']+f.val['b'], 'c'
	}
	sel, err := parseList(spec)
	if spec == "" || err != nil {
		p.errorf("you must specify a list of bytes, characters, or fields")
		return 1
	}
	delim := "\t"
	if f.on['d'] {
		delim = f.val['d']
	}
	lines, code := p.readLines(f.rest)
	var out []string
	for _, l := range lines {
		var kept []string
		if mode == 'c' {
			var b strings.Builder
			for i, r := range []rune(l) {
				if sel(i + 1) {
					b.WriteRune(r)
				}
			}
			out = append(out, b.String())
			continue
		}
		if !strings.Contains(l, delim) {
			if !f.on['s'] {
				out = append(out, l)
			}
			continue
		}
		for i, fld := range strings.Split(l, delim) {
			if sel(i + 1) {
				kept = append(kept, fld)
			}
		}
		out = append(out, strings.Join(kept, delim))
	}
	if c := p.writeLines(out); c != 0 {
		return c
	}
	return code
}

// teeUtil is tee [-a] FILE...
func teeUtil(ctx context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "ai", "", map[string]byte{"append": 'a'})
	if !ok {
		return 1
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if f.on['a'] {
		flag = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	ws := []io.Writer{p.stdout}
	code := 0
	for _, name := range f.rest {
		fh, err := p.sh.openFile(p.dir, name, flag, 0o644)
		if err != nil {
			code = p.fail(name, err)
			continue
		}
		defer fh.Close()
		ws = append(ws, fh)
	}
	buf := make([]byte, 32*1024)
	for {
		n, err := p.stdin.Read(buf)
		if n > 0 {
			for _, w := range ws {
				_, _ = w.Write(buf[:n])
			}
		}
		if err != nil || ctx.Err() != nil {
			break
		}
	}
	return code
}

// seqUtil is seq [-s SEP] [-w] [FIRST [INCR]] LAST.
func seqUtil(_ context.Context, p *proc) int {
	args := p.args[1:]
	sep, width := "\n", false
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' && (args[0][1] < '0' || args[0][1] > '9') {
		switch {
		case args[0] == "-w":
			width = true
		case args[0] == "-s" && len(args) > 1:
			sep = args[1]
			args = args[1:]
		case strings.HasPrefix(args[0], "-s"):
			sep = args[0][2:]
		default:
			p.errorf("invalid option '%s'", args[0])
			return 1
		}
		args = args[1:]
	}
	nums := make([]float64, len(args))
	integral := true
	for i, a := range args {
		n, err := strconv.ParseFloat(a, 64)
		if err != nil {
			p.errorf("invalid floating point argument: '%s'", a)
			return 1
		}
		nums[i] = n
		integral = integral && !strings.ContainsAny(a, ".eE")
	}
	first, incr, last := 1.0, 1.0, 0.0
	switch len(nums) {
	case 1:
		last = nums[0]
	case 2:
		first, last = nums[0], nums[1]
	case 3:
		first, incr, last = nums[0], nums[1], nums[2]
	default:
		p.errorf("missing operand")
		return 1
	}
	if incr == 0 {
		p.errorf("invalid Zero increment value")
		return 1
	}
	format := func(v float64) string {
		if integral {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	w := len(format(last))
	w = max(w, len(format(first)))
	bw := bufio.NewWriter(outWriter{p.stdout})
	n := 0
	for v := first; (incr > 0 && v <= last) || (incr < 0 && v >= last); v = first + float64(n)*incr {
		if n > 0 {
			bw.WriteString(sep)
		}
		s := format(v)
		if width {
			s = fmt.Sprintf("%0*s", w, s)
		}
		if _, err := bw.WriteString(s); err != nil {
			return 1
		}
		n++
	}
	if n > 0 {
		bw.WriteString("\n")
	}
	if bw.Flush() != nil {
		return 1
	}
	return 0
}

// dateUtil is date [-u] [-d @N|DATE] [-I] [+FORMAT].
func dateUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "uIR", "d", map[string]byte{"utc": 'u', "date": 'd'})
	if !ok {
		return 1
	}
	t := time.Now()
	if f.on['d'] {
		v := f.val['d']
		var err error
		if n, ok := strings.CutPrefix(v, "@"); ok {
			var sec int64
			sec, err = strconv.ParseInt(n, 10, 64)
			t = time.Unix(sec, 0)
		} else {
			t, err = parseDate(v)
		}
		if err != nil {
			p.errorf("invalid date '%s'", v)
			return 1
		}
	}
	if f.on['u'] {
		t = t.UTC()
	}
	format := "%a %b %e %H:%M:%S %Z %Y"
	switch {
	case f.on['I']:
		format = "%Y-%m-%d"
	case f.on['R']:
		format = "%a, %d %b %Y %H:%M:%S %z"
	}
	for _, a := range f.rest {
		if s, ok := strings.CutPrefix(a, "+"); ok {
			format = s
		}
	}
	fmt.Fprintln(p.stdout, strftime(format, t))
	return 0
}

// parseDate parses the date forms accepted by date -d.
func parseDate(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02", time.RFC1123Z, time.UnixDate} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid date %q", s)
}

// strftime formats t with the common conversions of date(1).
func strftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'N':
			fmt.Fprintf(&b, "%09d", t.Nanosecond())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 's':
			fmt.Fprintf(&b, "%d", t.Unix())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'u':
			fmt.Fprintf(&b, "%d", (int(t.Weekday())+6)%7+1)
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case 'R':
			b.WriteString(t.Format("15:04"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// unameUtil is uname [-asnrmo].
func unameUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "asnrvmpio", "", map[string]byte{"all": 'a'})
	if !ok {
		return 1
	}
	parts := []struct {
		c byte
		v string
	}{{'s', "Linux"}, {'n', p.hostname()}, {'r', "6.1.0-hybox"}, {'v', "#1 SMP"}, {'m', "wasm32"}, {'o', "hybox"}}
	var out []string
	for _, pt := range parts {
		if f.on['a'] || f.on[pt.c] || (pt.c == 's' && len(f.on) == 0) || (pt.c == 'm' && f.has("pi")) {
			out = append(out, pt.v)
		}
	}
	fmt.Fprintln(p.stdout, strings.Join(out, " "))
	return 0
}

// base64Util is base64 [-d] [-w COLS] [FILE].
func base64Util(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "di", "w", map[string]byte{"decode": 'd', "wrap": 'w', "ignore-garbage": 'i'})
	if !ok {
		return 1
	}
	cols := 76
	if f.on['w'] {
		cols, _ = strconv.Atoi(f.val['w'])
	}
	return p.inputs(f.rest[:min(1, len(f.rest))], func(_ string, r io.Reader) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		out := outWriter{p.stdout}
		if f.on['d'] {
			clean := bytes.Map(func(r rune) rune {
				if strings.ContainsRune(" \t\r\n", r) {
					return -1
				}
				return r
			}, b)
			dec, err := base64.StdEncoding.DecodeString(string(clean))
			if err != nil {
				if dec, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(string(clean), "=")); err != nil {
					return fmt.Errorf("invalid input")
				}
			}
			_, err = out.Write(dec)
			return err
		}
		enc := base64.StdEncoding.EncodeToString(b)
		var sb strings.Builder
		for cols > 0 && len(enc) > cols {
			sb.WriteString(enc[:cols])
			sb.WriteByte('\n')
			enc = enc[cols:]
		}
		sb.WriteString(enc)
		if sb.Len() > 0 {
			sb.WriteByte('\n')
		}
		_, err = io.WriteString(out, sb.String())
		return err
	})
}

// sumUtil is sha256sum, sha1sum and md5sum over files or stdin.
func sumUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "bt", "", nil)
	if !ok {
		return 1
	}
	newHash := map[string]func() hash.Hash{"sha256sum": sha256.New, "sha1sum": sha1.New, "md5sum": md5.New}[p.name()]
	return p.inputs(f.rest, func(name string, r io.Reader) error {
		h := newHash()
		if _, err := io.Copy(h, r); err != nil {
			return err
		}
		_, err := fmt.Fprintf(outWriter{p.stdout}, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), name)
		return err
	})
}

// yesUtil repeats a line until its reader goes away or ctx ends.
func yesUtil(ctx context.Context, p *proc) int {
	line := "y"
	if len(p.args) > 1 {
		line = strings.Join(p.args[1:], " ")
	}
	chunk := strings.Repeat(line+"\n", max(1, 4096/(len(line)+1)))
	for ctx.Err() == nil {
		if _, err := io.WriteString(p.stdout, chunk); err != nil {
			return 1
		}
	}
	return ExitInterrupted
}
