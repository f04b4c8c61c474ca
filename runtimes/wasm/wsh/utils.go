package wsh

import (
	"context"
	"fmt"
	"strings"
)

// utility returns the Go implementation of a command, or nil.
func (sh *shell) utility(name string) utility {
	switch name {
	case "sh", "bash", "dash", "ash":
		return shUtil
	case "ls":
		return lsUtil
	case "cat":
		return catUtil
	case "head":
		return headUtil
	case "tail":
		return tailUtil
	case "wc":
		return wcUtil
	case "mkdir":
		return mkdirUtil
	case "rm":
		return rmUtil
	case "rmdir":
		return rmdirUtil
	case "cp":
		return cpUtil
	case "mv":
		return mvUtil
	case "touch":
		return touchUtil
	case "env":
		return envUtil
	case "printenv":
		return printenvUtil
	case "sleep":
		return sleepUtil
	case "timeout":
		return timeoutUtil
	case "grep", "egrep", "fgrep":
		return grepUtil
	case "sed":
		return sedUtil
	case "sort":
		return sortUtil
	case "uniq":
		return uniqUtil
	case "tr":
		return trUtil
	case "cut":
		return cutUtil
	case "tee":
		return teeUtil
	case "basename":
		return basenameUtil
	case "dirname":
		return dirnameUtil
	case "seq":
		return seqUtil
	case "date":
		return dateUtil
	case "which":
		return whichUtil
	case "whoami":
		return whoamiUtil
	case "hostname":
		return hostnameUtil
	case "groups":
		return groupsUtil
	case "getent":
		return getentUtil
	case "nproc":
		return constUtil("1")
	case "id":
		return idUtil
	case "curl":
		return curlUtil
	case "wget":
		return wgetUtil
	case "uname":
		return unameUtil
	case "xargs":
		return xargsUtil
	case "find":
		return findUtil
	case "base64":
		return base64Util
	case "sha256sum", "md5sum", "sha1sum":
		return sumUtil
	case "yes":
		return yesUtil
	case "stat":
		return statUtil
	case "chmod":
		return chmodUtil
	case "ln":
		return lnUtil
	case "realpath":
		return realpathUtil
	case "readlink":
		return readlinkUtil
	case "true":
		return func(context.Context, *proc) int { return 0 }
	case "false":
		return func(context.Context, *proc) int { return 1 }
	case "pwd":
		return func(_ context.Context, p *proc) int { fmt.Fprintln(p.stdout, p.dir); return 0 }
	case "echo":
		return echoUtil
	}
	return nil
}

// constUtil prints a fixed line.
func constUtil(s string) utility {
	return func(_ context.Context, p *proc) int {
		fmt.Fprintln(p.stdout, s)
		return 0
	}
}

// echoUtil backs `xargs`, `env` and `timeout` when they run echo (the shell's
// own echo is the interpreter builtin).
func echoUtil(_ context.Context, p *proc) int {
	args := p.args[1:]
	nl := true
	if len(args) > 0 && args[0] == "-n" {
		nl, args = false, args[1:]
	}
	s := strings.Join(args, " ")
	if nl {
		s += "\n"
	}
	_, err := fmt.Fprint(p.stdout, s)
	if err != nil {
		return 1
	}
	return 0
}

// flagSet is the result of parseFlags.
type flagSet struct {
	on   map[byte]bool
	val  map[byte]string   // the last value of each letter
	vals map[byte][]string // every value of each letter, in order
	rest []string
}

// has reports whether any of the flags in s was given.
func (f flagSet) has(s string) bool {
	for i := range len(s) {
		if f.on[s[i]] {
			return true
		}
	}
	return false
}

// parseFlags parses short options: bools are the letters without value,
// vals the letters taking one ("-n 3", "-n3"); long maps long names to
// letters ("--recursive" → 'r'; a long option with "=" sets a value).
// Options and operands may be mixed, as with GNU tools; "--" ends options.
func (p *proc) parseFlags(args []string, bools, vals string, long map[string]byte) (flagSet, bool) {
	f := flagSet{on: map[byte]bool{}, val: map[byte]string{}, vals: map[byte][]string{}}

	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			f.rest = append(f.rest, args[i+1:]...)
			return f, true
		case strings.HasPrefix(a, "--"):
			name, v, hasV := strings.Cut(a[2:], "=")
			c, ok := long[name]
			if !ok {
				p.errorf("unrecognized option '%s'", a)
				return f, false
			}
			f.on[c] = true
			if hasV {
				f.val[c] = v
				f.vals[c] = append(f.vals[c], v)
			} else if strings.IndexByte(vals, c) >= 0 {
				if i+1 >= len(args) {
					p.errorf("option '%s' requires an argument", a)
					return f, false
				}
				i++
				f.val[c] = args[i]
				f.vals[c] = append(f.vals[c], args[i])
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				c := a[j]
				switch {
				case strings.IndexByte(vals, c) >= 0:
					f.on[c] = true
					if j+1 < len(a) {
						f.val[c] = a[j+1:]
						f.vals[c] = append(f.vals[c], a[j+1:])
					} else if i+1 < len(args) {
						i++
						f.val[c] = args[i]
						f.vals[c] = append(f.vals[c], args[i])
					} else {
						p.errorf("option requires an argument -- '%c'", c)
						return f, false
					}
					j = len(a)
				case strings.IndexByte(bools, c) >= 0:
					f.on[c] = true
				default:
					p.errorf("invalid option -- '%c'", c)
					return f, false
				}
			}
		default:
			f.rest = append(f.rest, a)
		}
	}
	return f, true
}
