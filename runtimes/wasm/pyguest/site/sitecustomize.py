# hybox start-up hook for the CPython WASI guest; site.py imports it before
# any user code runs. The host puts this directory on PYTHONPATH.
#
# 1. WASI has no working directory of its own: wasi-libc starts every program
#    at "/". The host passes the wanted one in HYBOX_CWD.
# 2. time.sleep uses an absolute-deadline clock wait that the host's WASI
#    does not support (it fails with ENOTSUP); select() with a relative
#    timeout works, so sleep is rebuilt on it.
# 3. HTTP goes to the host through hybox_http (next to this file, off
#    sys.path): a finder imports it, and patches urllib.request and
#    http.client on their first import. The code lives in hybox_http: this
#    file is compiled at every start.
# 4. pwd and grp (which WASI lacks) come from pwd.py and grp.py next to this
#    file, over the sandbox's /etc/passwd and /etc/group; os.getuid and
#    friends answer the sandbox user's ids; socket.gethostname (patched by
#    hybox_http on socket's first import) answers /etc/hostname.
import os as _os
import sys as _sys


def _setup():
    import select
    import time

    here = _os.path.dirname(__file__)
    cwd = _os.environ.pop("HYBOX_CWD", None)
    if cwd:
        try:
            _os.chdir(cwd)
        except OSError as e:
            print("python3: cannot change directory to %r: %s" % (cwd, e), file=_sys.stderr)
    while here in _sys.path:
        _sys.path.remove(here)
    user_path = _os.environ.pop("HYBOX_USER_PYTHONPATH", None)
    if user_path:
        _os.environ["PYTHONPATH"] = user_path
    else:
        _os.environ.pop("PYTHONPATH", None)

    wait = select.select
    monotonic = time.monotonic
    original = time.sleep

    def sleep(secs):
        if isinstance(secs, (str, bytes, bytearray)):
            raise TypeError("'%s' object cannot be interpreted as an integer" % type(secs).__name__)
        secs = float(secs)
        if secs != secs:
            raise ValueError("Invalid value NaN (not a number)")
        if secs < 0:
            raise ValueError("sleep length must be non-negative")
        deadline = monotonic() + secs
        while True:
            left = deadline - monotonic()
            if left <= 0:
                return
            wait([], [], [], left)

    sleep.__doc__ = original.__doc__
    sleep.__module__ = "time"
    time.sleep = sleep

    class HyboxFinder:  # see hybox_http._find_spec
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name in ("hybox_http", "urllib.request", "http.client", "socket", "hybox_pwd", "pwd", "grp"):
                from importlib.util import spec_from_file_location as spec

                if name in ("hybox_http", "hybox_pwd", "pwd", "grp"):
                    return spec(name, here + "/" + name + ".py")
                import hybox_http

                return hybox_http._find_spec(HyboxFinder, name, path, target)

    _sys.meta_path.insert(0, HyboxFinder)

    # WASI has no user ids; the sandbox's programs run as user (1000), as
    # its /etc/passwd says (pwd and grp, from hybox_pwd, read that file).
    for fn in ("getuid", "geteuid", "getgid", "getegid"):
        if not hasattr(_os, fn):
            setattr(_os, fn, lambda: 1000)
    if not hasattr(_os, "getgroups"):
        _os.getgroups = lambda: [1000]


_setup()
del _os, _sys, _setup
