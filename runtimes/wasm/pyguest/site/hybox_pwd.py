# pwd and grp for the CPython WASI guest, which has neither (wasi-libc has
# no user database): both read the sandbox's /etc/passwd and /etc/group,
# the files the host writes into every wasm sandbox. pwd.py and grp.py (next
# to this file, imported by sitecustomize's finder) export the names of
# CPython's modules of the same names.
import collections as _collections

_passwd_fields = ("pw_name", "pw_passwd", "pw_uid", "pw_gid", "pw_gecos", "pw_dir", "pw_shell")
_group_fields = ("gr_name", "gr_passwd", "gr_gid", "gr_mem")


class struct_passwd(_collections.namedtuple("struct_passwd", _passwd_fields)):
    """pwd.struct_passwd: Results from getpw*() routines."""

    __slots__ = ()
    n_fields = n_sequence_fields = 7
    n_unnamed_fields = 0

    def __new__(cls, sequence):  # a structseq is built from one sequence
        return super().__new__(cls, *sequence)


class struct_group(_collections.namedtuple("struct_group", _group_fields)):
    """grp.struct_group: Results from getgr*() routines."""

    __slots__ = ()
    n_fields = n_sequence_fields = 4
    n_unnamed_fields = 0

    def __new__(cls, sequence):  # a structseq is built from one sequence
        return super().__new__(cls, *sequence)


struct_passwd.__module__ = "pwd"
struct_group.__module__ = "grp"


def _lines(path):
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            data = f.read(1 << 20)
    except OSError:
        return []
    return [l.split(":") for l in data.splitlines() if l and not l.startswith("#")]


def getpwall():
    out = []
    for f in _lines("/etc/passwd"):
        if len(f) >= 7 and f[2].isdigit() and f[3].isdigit():
            out.append(struct_passwd((f[0], f[1], int(f[2]), int(f[3]), f[4], f[5], ":".join(f[6:]))))
    return out


def getpwnam(name):
    if not isinstance(name, str):
        raise TypeError("getpwnam() argument must be str, not %s" % type(name).__name__)
    for p in getpwall():
        if p.pw_name == name:
            return p
    raise KeyError("getpwnam(): name not found: %r" % name)


def getpwuid(uid):
    uid = _id(uid, "uid")
    for p in getpwall():
        if p.pw_uid == uid:
            return p
    raise KeyError("getpwuid(): uid not found: %d" % uid)


def getgrall():
    out = []
    for f in _lines("/etc/group"):
        if len(f) >= 4 and f[2].isdigit():
            out.append(struct_group((f[0], f[1], int(f[2]), [m for m in f[3].split(",") if m])))
    return out


def getgrnam(name):
    if not isinstance(name, str):
        raise TypeError("getgrnam() argument must be str, not %s" % type(name).__name__)
    for g in getgrall():
        if g.gr_name == name:
            return g
    raise KeyError("getgrnam(): name not found: %r" % name)


def getgrgid(id):
    gid = _id(id, "gid")
    for g in getgrall():
        if g.gr_gid == gid:
            return g
    raise KeyError("getgrgid(): gid not found: %d" % gid)


def _id(v, what):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            v = v.__index__()
        except AttributeError:
            raise TypeError("'%s' object cannot be interpreted as an integer" % type(v).__name__) from None
    return v
