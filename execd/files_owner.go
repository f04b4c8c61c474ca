package execd

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// wireMode is a file mode as the wire carries it (api.FileMode).
type wireMode = api.FileMode

// fileMode converts m to an fs.FileMode including the setuid, setgid and
// sticky bits. set is false when m is zero, which the API treats as "not
// given" (clients send 0 for an unset mode).
//
// # Errors
// errBadRequest when m is negative, has a digit above 7, or exceeds 7777.
func fileModeOf(m wireMode) (mode fs.FileMode, set bool, err error) {
	if m == 0 {
		return 0, false, nil
	}
	if mode, err = m.FileMode(); err != nil {
		return 0, false, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return mode, true, nil
}

// modeToWire converts the permission bits of m (with setuid, setgid and
// sticky) to the wire form: 0o4755 becomes 4755.
func modeToWire(m fs.FileMode) int { return int(api.ModeOf(m)) }

// maxIDFile caps how much of the guest's /etc/passwd or /etc/group is read.
const maxIDFile = 4 << 20

// idNames maps uids and gids to names and back, using the guest's own
// /etc/passwd and /etc/group (read through the os.Root, once, on first
// use). Ids without a name are shown as numbers. One idNames serves one
// request; it is not safe for concurrent use.
type idNames struct {
	root              *os.Root
	loaded            bool
	users, groups     map[uint32]string
	userIDs, groupIDs map[string]uint32
}

func newIDNames(root *os.Root) *idNames {
	return &idNames{root: root}
}

func (n *idNames) load() {
	if n.loaded {
		return
	}
	n.loaded = true
	n.users, n.userIDs = n.parse("etc/passwd")
	n.groups, n.groupIDs = n.parse("etc/group")
}

// parse reads "name:x:id:..." lines; a missing or unreadable file gives
// empty maps.
func (n *idNames) parse(name string) (map[uint32]string, map[string]uint32) {
	byID, byName := map[uint32]string{}, map[string]uint32{}
	f, err := n.root.Open(name)
	if err != nil {
		return byID, byName
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return byID, byName
	}
	data, err := readAllLimit(f, maxIDFile)
	if err != nil {
		return byID, byName
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxIDFile)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), ":", 4)
		if len(fields) < 3 || fields[0] == "" || strings.HasPrefix(fields[0], "#") {
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		if _, dup := byID[uint32(id)]; !dup {
			byID[uint32(id)] = fields[0]
		}
		if _, dup := byName[fields[0]]; !dup {
			byName[fields[0]] = uint32(id)
		}
	}
	return byID, byName
}

func (n *idNames) userName(uid uint32) string {
	n.load()
	if s, ok := n.users[uid]; ok {
		return s
	}
	return strconv.FormatUint(uint64(uid), 10)
}

func (n *idNames) groupName(gid uint32) string {
	n.load()
	if s, ok := n.groups[gid]; ok {
		return s
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// lookup resolves a user (or group) name or a numeric id.
func lookupID(name string, byName map[string]uint32) (int, bool) {
	if id, ok := byName[name]; ok {
		return int(id), true
	}
	if id, err := strconv.ParseUint(name, 10, 31); err == nil {
		return int(id), true
	}
	return 0, false
}

// resolve turns owner and group names into ids; -1 means "leave alone".
//
// # Errors
// errBadRequest when a name is neither known to the guest nor numeric.
func (n *idNames) resolve(owner, group string) (uid, gid int, err error) {
	n.load()
	uid, gid = -1, -1
	if owner != "" {
		id, ok := lookupID(owner, n.userIDs)
		if !ok {
			return 0, 0, fmt.Errorf("%w: unknown user %q", errBadRequest, owner)
		}
		uid = id
	}
	if group != "" {
		id, ok := lookupID(group, n.groupIDs)
		if !ok {
			return 0, 0, fmt.Errorf("%w: unknown group %q", errBadRequest, group)
		}
		gid = id
	}
	return uid, gid, nil
}

// chownIfNeeded applies owner and group (names or numbers; empty = leave
// alone) to the file described by fi, calling chown only when they differ
// from its current ids. So an unprivileged server accepts requests that
// name the owner a file already has, and refuses others with 403 unless
// the OS allows the change.
//
// # Errors
// errBadRequest for an unknown name; chown's error rewritten by fsErr.
func chownIfNeeded(ids *idNames, guest string, fi fs.FileInfo, owner, group string, chown func(uid, gid int) error) error {
	if owner == "" && group == "" {
		return nil
	}
	uid, gid, err := ids.resolve(owner, group)
	if err != nil {
		return err
	}
	if cu, cg, ok := fileOwner(fi); ok {
		if uid == int(cu) {
			uid = -1
		}
		if gid == int(cg) {
			gid = -1
		}
	}
	if uid == -1 && gid == -1 {
		return nil
	}
	if err := chown(uid, gid); err != nil {
		return fsErr(guest, err)
	}
	return nil
}
