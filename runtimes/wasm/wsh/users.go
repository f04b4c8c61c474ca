package wsh

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// The shell's programs run as uid 1000 and gid 1000 (named by the sandbox's
// /etc/passwd and /etc/group: user).
const (
	shellUID = wasmfs.GuestUID
	shellGID = wasmfs.GuestGID
)

// maxUserDB caps how much of /etc/passwd or /etc/group is read.
const maxUserDB = 1 << 20

// account is one line of /etc/passwd.
type account struct {
	name     string
	uid, gid int
	line     string
}

// group is one line of /etc/group.
type group struct {
	name    string
	gid     int
	members []string
	line    string
}

// userDB is the sandbox's /etc/passwd and /etc/group, read through the root.
type userDB struct {
	users  []account
	groups []group
}

// readDB reads the user database; missing files give an empty one.
func (p *proc) readDB() userDB {
	var db userDB
	p.sysLines("etc/passwd", func(f []string, line string) {
		if len(f) < 7 {
			return
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 == nil && err2 == nil && f[0] != "" {
			db.users = append(db.users, account{name: f[0], uid: uid, gid: gid, line: line})
		}
	})
	p.sysLines("etc/group", func(f []string, line string) {
		if len(f) < 4 {
			return
		}
		gid, err := strconv.Atoi(f[2])
		if err == nil && f[0] != "" {
			var members []string
			if f[3] != "" {
				members = strings.Split(f[3], ",")
			}
			db.groups = append(db.groups, group{name: f[0], gid: gid, members: members, line: line})
		}
	})
	return db
}

func (p *proc) sysLines(name string, fn func(fields []string, line string)) {
	f, err := p.sh.root.Open(name)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxUserDB))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fn(strings.Split(line, ":"), line)
	}
}

// user finds an account by name, or by number when no name matches.
func (db userDB) user(key string) (account, bool) {
	for _, u := range db.users {
		if u.name == key {
			return u, true
		}
	}
	if id, err := strconv.Atoi(key); err == nil {
		return db.userByID(id)
	}
	return account{}, false
}

func (db userDB) userByID(uid int) (account, bool) {
	for _, u := range db.users {
		if u.uid == uid {
			return u, true
		}
	}
	return account{}, false
}

func (db userDB) groupByID(gid int) (group, bool) {
	for _, g := range db.groups {
		if g.gid == gid {
			return g, true
		}
	}
	return group{}, false
}

// current is the account the shell's programs run as (a stand-in when the
// database does not name uid 1000).
func (db userDB) current() account {
	if u, ok := db.userByID(shellUID); ok {
		return u
	}
	return account{name: strconv.Itoa(shellUID), uid: shellUID, gid: shellGID}
}

// groupsOf lists u's primary group, then the groups naming u as a member.
func (db userDB) groupsOf(u account) []int {
	ids := []int{u.gid}
	for _, g := range db.groups {
		if g.gid == u.gid {
			continue
		}
		for _, m := range g.members {
			if m == u.name {
				ids = append(ids, g.gid)
				break
			}
		}
	}
	return ids
}

func (db userDB) groupName(gid int) (string, bool) {
	if g, ok := db.groupByID(gid); ok {
		return g.name, true
	}
	return strconv.Itoa(gid), false
}

// idUtil is id [-u|-g|-G [-n] [-r]] [USER], as GNU coreutils prints it.
func idUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "ugGnrz", "", map[string]byte{"user": 'u', "group": 'g', "groups": 'G', "name": 'n', "real": 'r', "zero": 'z'})
	if !ok {
		return 1
	}
	if len(f.rest) > 1 {
		p.errorf("extra operand %s", quote(f.rest[1]))
		return 1
	}
	only := 0
	for _, c := range "ugG" {
		if f.on[byte(c)] {
			only++
		}
	}
	if only > 1 {
		p.errorf("cannot print \"only\" of more than one choice")
		return 1
	}
	if only == 0 && f.on['n'] {
		p.errorf("cannot print only names or real IDs in default format")
		return 1
	}
	db := p.readDB()
	u := db.current()
	if len(f.rest) == 1 {
		var found bool
		if u, found = db.user(f.rest[0]); !found {
			p.errorf("%s: no such user", quote(f.rest[0]))
			return 1
		}
	}
	switch {
	case f.on['u']:
		if f.on['n'] {
			fmt.Fprintln(p.stdout, u.name)
		} else {
			fmt.Fprintln(p.stdout, u.uid)
		}
	case f.on['g']:
		if f.on['n'] {
			name, _ := db.groupName(u.gid)
			fmt.Fprintln(p.stdout, name)
		} else {
			fmt.Fprintln(p.stdout, u.gid)
		}
	case f.on['G']:
		var out []string
		for _, g := range db.groupsOf(u) {
			if f.on['n'] {
				name, _ := db.groupName(g)
				out = append(out, name)
			} else {
				out = append(out, strconv.Itoa(g))
			}
		}
		fmt.Fprintln(p.stdout, strings.Join(out, " "))
	default:
		withName := func(id int, name string, named bool) string {
			if !named {
				return strconv.Itoa(id)
			}
			return fmt.Sprintf("%d(%s)", id, name)
		}
		_, uNamed := db.userByID(u.uid)
		gName, gNamed := db.groupName(u.gid)
		var gs []string
		for _, g := range db.groupsOf(u) {
			name, named := db.groupName(g)
			gs = append(gs, withName(g, name, named))
		}
		fmt.Fprintf(p.stdout, "uid=%s gid=%s groups=%s\n", withName(u.uid, u.name, uNamed), withName(u.gid, gName, gNamed), strings.Join(gs, ","))
	}
	return 0
}

// quote is how coreutils quotes an operand in a UTF-8 locale.
func quote(s string) string { return "‘" + s + "’" }

// whoamiUtil prints the name of the shell's user.
func whoamiUtil(_ context.Context, p *proc) int {
	if len(p.args) > 1 {
		p.errorf("extra operand %s", quote(p.args[1]))
		return 1
	}
	db := p.readDB()
	u, ok := db.userByID(shellUID)
	if !ok {
		p.errorf("cannot find name for user ID %d", shellUID)
		return 1
	}
	fmt.Fprintln(p.stdout, u.name)
	return 0
}

// groupsUtil is groups [USER...].
func groupsUtil(_ context.Context, p *proc) int {
	db := p.readDB()
	names := func(u account) string {
		var out []string
		for _, g := range db.groupsOf(u) {
			name, _ := db.groupName(g)
			out = append(out, name)
		}
		return strings.Join(out, " ")
	}
	if len(p.args) == 1 {
		fmt.Fprintln(p.stdout, names(db.current()))
		return 0
	}
	code := 0
	for _, name := range p.args[1:] {
		u, ok := db.user(name)
		if !ok {
			p.errorf("%s: no such user", quote(name))
			code = 1
			continue
		}
		fmt.Fprintf(p.stdout, "%s : %s\n", name, names(u))
	}
	return code
}

// getentUtil is getent passwd|group|hosts [KEY...]: exit 2 when a key is
// not found, as glibc's getent.
func getentUtil(_ context.Context, p *proc) int {
	if len(p.args) < 2 {
		p.errorf("wrong number of arguments")
		return 1
	}
	db := p.readDB()
	keys := p.args[2:]
	switch p.args[1] {
	case "passwd":
		return p.getent(keys, len(db.users), func(i int) (string, string, int) {
			u := db.users[i]
			return u.line, u.name, u.uid
		})
	case "group":
		return p.getent(keys, len(db.groups), func(i int) (string, string, int) {
			g := db.groups[i]
			return g.line, g.name, g.gid
		})
	case "hosts":
		var lines []string
		p.sysLines("etc/hosts", func(_ []string, line string) { lines = append(lines, line) })
		return p.getent(keys, len(lines), func(i int) (string, string, int) {
			f := strings.Fields(lines[i])
			if len(f) < 2 {
				return lines[i], "", -1
			}
			return f[0] + "       " + strings.Join(f[1:], " "), strings.Join(f, " "), -1
		})
	default:
		p.errorf("Unknown database: %s", p.args[1])
		return 1
	}
}

// getent prints every entry, or those matching keys (by name or id).
func (p *proc) getent(keys []string, n int, entry func(int) (line, name string, id int)) int {
	if len(keys) == 0 {
		for i := range n {
			line, _, _ := entry(i)
			fmt.Fprintln(p.stdout, line)
		}
		return 0
	}
	code := 0
	for _, k := range keys {
		found := false
		for i := range n {
			line, name, id := entry(i)
			if name == k || (id >= 0 && strconv.Itoa(id) == k) || (id < 0 && containsWord(name, k)) {
				fmt.Fprintln(p.stdout, line)
				found = true
				break
			}
		}
		if !found {
			code = 2
		}
	}
	return code
}

func containsWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// hostname is the first line of /etc/hostname ("localhost" without one).
func (p *proc) hostname() string {
	name := "localhost"
	p.sysLines("etc/hostname", func(_ []string, line string) {
		if name == "localhost" {
			name = strings.TrimSpace(line)
		}
	})
	return name
}

// hostnameUtil is hostname [-s|-f|-i|-I]; setting the name is refused.
func hostnameUtil(_ context.Context, p *proc) int {
	f, ok := p.parseFlags(p.args[1:], "sfiIAd", "", map[string]byte{"short": 's', "fqdn": 'f', "long": 'f', "ip-address": 'i', "all-ip-addresses": 'I', "domain": 'd'})
	if !ok {
		return 1
	}
	if len(f.rest) > 0 {
		p.errorf("you must be root to change the host name")
		return 1
	}
	name := p.hostname()
	switch {
	case f.on['i'], f.on['I']:
		fmt.Fprintln(p.stdout, "127.0.1.1")
	case f.on['d']:
		fmt.Fprintln(p.stdout)
	case f.on['s']:
		short, _, _ := strings.Cut(name, ".")
		fmt.Fprintln(p.stdout, short)
	default:
		fmt.Fprintln(p.stdout, name)
	}
	return 0
}
