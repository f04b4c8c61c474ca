# hybox persistent-context driver, for the CPython WASI guest and for a
# native python3 in a container.
#
# Run as `python -u -c <this file>`. It keeps one interpreter alive and runs
# the code cells the host sends, like a notebook kernel.
#
# SIGINT interrupts the running cell only (it raises KeyboardInterrupt there,
# once per cell); between cells it is ignored, so the host may repeat it
# until the cell ends without risking the driver itself.
#
# Requests (host -> guest, fd 0): "<kind> <decimal byte length>\n<payload>".
#   init: payload {"cwd": "/dir", "env": {"HOME": "/dir"}, "clone": bool, "restored": bool,
#         "warm": bool}
#         (JSON; clone: reseed and drop caches copied from an image; restored:
#         the context was restored into a new instance, its open files are
#         gone; warm: run one hidden cell now, and remove its traces, so that
#         the first real cell finds built what a first cell builds lazily);
#         no reply (a warm-up's result frame may come first)
#   exec: payload is the cell's source (UTF-8); reply: frames, then done
#
# Replies (guest -> host, fd 1): MAGIC + one line of ASCII JSON + "\n".
#   {"type": "ready"}                          once, after start-up
#   {"type": "result", "data": {mime: str}}   a trailing expression's value, or display()
#   {"type": "error", "ename", "evalue", "traceback": [str]}
#   {"type": "done"}                           end of one exec request
# Every other byte on fd 1 is the cell's stdout, written through as it is
# produced; fd 2 carries its stderr.

import ast
import base64
import builtins
import io
import json
import linecache
import os
import sys
import traceback
import types

MAGIC = b"\x00\x1bHYBOX\x1d"
DRIVER_FILE = sys._getframe().f_code.co_filename


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _flush_user_streams():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


def _frame(obj):
    _flush_user_streams()
    _write_all(1, MAGIC + json.dumps(obj, ensure_ascii=True).encode("ascii") + b"\n")


def _private_request_fd():
    """Moves the request stream off fd 0, so that child processes of a cell
    cannot read requests; fd 0 becomes /dev/null. Where dup is missing (WASI)
    the requests stay on fd 0."""
    try:
        fd = os.dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        return fd
    except (AttributeError, OSError):
        return 0


class _Requests:
    """Reads length-prefixed JSON requests from the request fd."""

    def __init__(self, fd=0):
        self.fd = fd
        self.buf = b""

    def _fill(self):
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def next(self):
        """Returns (kind, payload bytes)."""
        while b"\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\n")
        kind, _, size = head.partition(b" ")
        size = int(size)
        while len(self.buf) < size:
            self._fill()
        body, self.buf = self.buf[:size], self.buf[size:]
        return kind, body


_LAST = "__hybox_last_value__"

_MIME_REPRS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
    ("application/pdf", "_repr_pdf_"),
)


# Values of these exact types have no rich representation: skip the lookups.
_PLAIN_TYPES = frozenset((int, float, complex, bool, str, bytes, list, tuple, dict, set, frozenset, range))


def _is_json_mime(mime):
    return mime == "application/json" or mime.endswith("+json")


def _is_text_mime(mime):
    return mime.startswith("text/") or mime in ("image/svg+xml", "application/javascript") or mime.endswith("+xml")


def _wire_value(mime, data):
    """One representation as the wire carries it: a string. JSON types as JSON text, text
    types as text, everything else (images, PDF) base64. None when it cannot be encoded."""
    if _is_json_mime(mime):
        if isinstance(data, (bytes, bytearray)):
            data = bytes(data).decode("utf-8", "replace")
        if isinstance(data, str):
            return data  # JSON text already, as IPython accepts it
        try:
            return json.dumps(data)
        except (TypeError, ValueError):
            return None
    if isinstance(data, (bytes, bytearray)):
        if _is_text_mime(mime):
            return bytes(data).decode("utf-8", "replace")
        return base64.b64encode(data).decode("ascii")
    if isinstance(data, str):
        return data  # text, or binary that is base64 already
    return None


def _call_repr(fn, *args):
    """Calls a _repr_*_ method like IPython: an exception or None means "no such
    representation" (the error is reported on stderr); a (data, metadata) pair gives data."""
    try:
        data = fn(*args)
    except Exception as e:
        print("hybox: %s failed: %s: %s" % (getattr(fn, "__name__", "repr"), type(e).__name__, e),
              file=sys.stderr)
        return None
    if isinstance(data, tuple) and len(data) == 2:
        data = data[0]
    return data


def _figure_png(fig):
    """A matplotlib figure as PNG bytes (what IPython's inline backend shows)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _type_formatters(value):
    """Representations for types that do not define _repr_*_ themselves but that Jupyter
    still shows richly (matplotlib figures and axes, when matplotlib is loaded)."""
    mpl = sys.modules.get("matplotlib.figure")
    if mpl is None:
        return {}
    fig = None
    if isinstance(value, mpl.Figure):
        fig = value
    else:
        axes = sys.modules.get("matplotlib.axes")
        if axes is not None and isinstance(value, axes.Axes):
            fig = value.figure
    if fig is None:
        return {}
    try:
        return {"image/png": _figure_png(fig)}
    except Exception as e:
        print("hybox: cannot render the figure: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return {}


def _mime_bundle(value):
    """Every representation of value, like IPython's DisplayFormatter: _repr_mimebundle_
    first, then each _repr_*_ method for the types it did not give, then text/plain."""
    bundle = {}
    if type(value) in _PLAIN_TYPES:
        return {"text/plain": repr(value)}
    fn = getattr(value, "_repr_mimebundle_", None)
    if callable(fn) and not isinstance(value, type):
        data = _call_repr(fn, None, None)
        if isinstance(data, dict):
            for mime, v in data.items():
                w = _wire_value(mime, v)
                if w is not None:
                    bundle[mime] = w
    for mime, meth in _MIME_REPRS:
        if mime in bundle:
            continue
        fn = getattr(value, meth, None)
        # A class is not its instances: its _repr_*_ are unbound functions.
        if fn is None or not callable(fn) or isinstance(value, type):
            continue
        data = _call_repr(fn)
        if data is None:
            continue
        w = _wire_value(mime, data)
        if w is not None:
            bundle[mime] = w
    for mime, data in _type_formatters(value).items():
        bundle.setdefault(mime, _wire_value(mime, data))
    if "text/plain" not in bundle:
        try:
            bundle["text/plain"] = repr(value)
        except Exception as e:
            bundle["text/plain"] = "<%s object (repr failed: %s)>" % (type(value).__name__, e)
    return bundle


def display(*objs, raw=False):
    """Emits each object as a rich result at once, like IPython's display(): the result
    streams to the client while the cell goes on. With raw=True each object is a MIME
    bundle (a dict of MIME type to data) to send as it is."""
    for obj in objs:
        if raw and isinstance(obj, dict):
            data = {}
            for mime, v in obj.items():
                w = _wire_value(mime, v)
                if w is not None:
                    data[mime] = w
        else:
            data = _mime_bundle(obj)
        _frame({"type": "result", "data": data})


def _show_figures(shown=None):
    """Each open matplotlib figure (but those in shown) becomes a result; then all are
    closed, as Jupyter's inline backend does at plt.show() and at the end of a cell."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        if shown is None or id(fig) not in shown:
            display(fig)
    plt.close("all")


class _PyplotHook:
    """A meta path finder that makes matplotlib.pyplot.show() emit the open figures as
    results, whenever the cell imports pyplot. Every other import is not its business."""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        import importlib.util
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig = loader.exec_module

        def exec_module(module):
            orig(module)
            module.show = lambda *args, **kwargs: _show_figures()

        loader.exec_module = exec_module
        return spec


def _user_traceback(exc):
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == DRIVER_FILE:
        tb = tb.tb_next
    te = traceback.TracebackException(type(exc), exc, tb)
    # The SIGINT handler's frame ends a KeyboardInterrupt's stack: hide it.
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != DRIVER_FILE])
    return list(te.format())


def _error(exc, tb_lines):
    _frame({
        "type": "error",
        "ename": type(exc).__name__,
        "evalue": str(exc),
        "traceback": tb_lines,
    })


class _Kernel:
    def __init__(self):
        self.count = 0
        self.running = False  # a cell is executing: SIGINT may interrupt it
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        self.ns = main.__dict__
        builtins.display = display
        # matplotlib draws off-screen; pyplot.show() and the cell's end display figures.
        os.environ.setdefault("MPLBACKEND", "Agg")
        sys.meta_path.insert(0, _PyplotHook())
        # Cells must not read the request stream: give them an empty stdin.
        sys.stdin = io.StringIO("")

    def init(self, payload):
        req = json.loads(payload)
        for k, v in (req.get("env") or {}).items():
            os.environ[k] = v
        cwd = req.get("cwd")
        if cwd:
            try:
                os.chdir(cwd)
            except OSError as e:
                print("hybox: cannot change directory to %r: %s" % (cwd, e), file=sys.stderr)
            # The finder of the working directory (sys.path[0] == "") was
            # made for the old one.
            sys.path_importer_cache.pop("", None)
        if req.get("clone"):
            # A context cloned from a memory image shares the image's
            # random state: give it its own.
            rnd = sys.modules.get("random")
            if rnd is not None:
                rnd.seed()
        if req.get("restored"):
            # Restored from saved state into a new instance: the files the
            # context had open are not open there. Close their objects, so
            # that using one fails plainly instead of reaching whatever file
            # later gets the same descriptor.
            import gc
            for obj in gc.get_objects():
                if isinstance(obj, io.FileIO) and not obj.closed and obj.fileno() > 2:
                    try:
                        obj.close()
                    except OSError:
                        pass

        if req.get("warm"):
            _warm_up(self)
            # A finder the warm-up made for the working directory saw the
            # directory before its workspace was bound.
            sys.path_importer_cache.pop("", None)

    def on_sigint(self, signum, frame):
        if self.running:
            self.running = False  # at most one KeyboardInterrupt per cell
            raise KeyboardInterrupt

    def install_sigint(self):
        try:
            import signal
            signal.signal(signal.SIGINT, self.on_sigint)
        except (ImportError, AttributeError, OSError, ValueError):
            pass

    def run(self, code):
        try:
            self.running = True
            self._run(code)
        except KeyboardInterrupt as e:  # arrived outside the user's code
            self.running = False
            _error(e, ["KeyboardInterrupt"])
        finally:
            self.running = False

    def _run(self, code):
        self.count += 1
        name = "<cell-%d>" % self.count
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        # A short cell that is one expression compiles in eval mode
        # directly, without building a Python AST (most of a small cell's
        # cost); anything else fails that compile at once.
        if len(code) < 512:
            try:
                expr = compile(code, name, "eval", dont_inherit=True)
            except (SyntaxError, ValueError, OverflowError):
                expr = None
            except (MemoryError, RecursionError) as e:
                _error(e, traceback.format_exception_only(type(e), e))
                return
            if expr is not None:
                self._eval(expr)
                return
        try:
            tree = ast.parse(code, name, "exec")
        except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
            _error(e, traceback.format_exception_only(type(e), e))
            return
        # The value of a trailing expression statement is the cell's result.
        # One compile is the costly part of a small cell (the guest is built
        # at -O0), so a lone expression is compiled in eval mode and
        # otherwise the statement becomes an assignment to a hidden name.
        body = tree.body
        has_value = bool(body) and isinstance(body[-1], ast.Expr)
        try:
            if has_value and len(body) == 1:
                value = eval(compile(ast.Expression(body[0].value), name, "eval"), self.ns)
            else:
                if has_value:
                    last = body[-1]
                    body[-1] = ast.copy_location(
                        ast.Assign(targets=[ast.Name(_LAST, ast.Store())], value=last.value), last)
                    ast.fix_missing_locations(body[-1])
                exec(compile(tree, name, "exec"), self.ns)
                value = self.ns.pop(_LAST, None)
            self._finish(value)
        except BaseException as e:  # SystemExit and KeyboardInterrupt included
            self.running = False
            try:
                lines = _user_traceback(e)
            except BaseException:
                lines = []
            _error(e, lines)

    def _finish(self, value):
        """The end of a cell: its value is shown, then each matplotlib figure still
        open (but the value's own)."""
        shown = set()
        if value is not None:
            self.ns["_"] = value
            display(value)
            shown.add(id(value))
            fig = getattr(value, "figure", None)
            if fig is not None:
                shown.add(id(fig))
        if "matplotlib.pyplot" in sys.modules:
            _show_figures(shown)

    def _eval(self, expr):
        try:
            value = eval(expr, self.ns)
            self._finish(value)
        except BaseException as e:  # SystemExit and KeyboardInterrupt included
            self.running = False
            try:
                lines = _user_traceback(e)
            except BaseException:
                lines = []
            _error(e, lines)


_DONE = MAGIC + b'{"type": "done"}\n'


def _serve(kernel, kind, payload):
    if kind == b"init":
        kernel.init(payload)
    elif kind == b"exec":
        kernel.run(payload.decode("utf-8", "surrogateescape"))
        _flush_user_streams()
        _write_all(1, _DONE)


def _main():
    kernel = _Kernel()
    kernel.install_sigint()
    requests = _Requests(_private_request_fd())
    _frame({"type": "ready"})
    while True:
        try:
            kind, payload = requests.next()
        except EOFError:
            return
        _serve(kernel, kind, payload)


# The WASI reactor (scripts/guests/python/reactor.c) imports this file as a
# module instead of running it: hybox_init calls reactor_init once, and each
# hybox_run calls reactor_serve, which answers the requests queued on fd 0
# and returns when fd 0 has no more (the host's stdin reports end of input
# whenever its queue is empty). The host raises KeyboardInterrupt or
# TimeoutError in a running cell through CPython's async-exception slot
# rather than SIGINT, so no signal handler is installed.
_reactor = None


def _warm_up(kernel):
    """Run one cell and remove its traces (count, _, its source)."""
    count = kernel.count
    kernel.run("1+1")
    _flush_user_streams()
    linecache.cache.pop("<cell-%d>" % kernel.count, None)
    kernel.count = count
    kernel.ns.pop("_", None)


def reactor_init():
    global _reactor
    _reactor = (_Kernel(), _Requests(0))
    if "" not in sys.path:
        sys.path.insert(0, "")  # the working directory, as for `python -c`
    # Run one cell now, so that what the first cell of every clone would
    # build lazily (parser, compiler and encoder state, caches) is in the
    # image already; its output goes to the image's own stdout.
    _warm_up(_reactor[0])
    # What start-up built is shared by every clone of the image: keep the
    # collector off it, or a collection would write to (and so copy) every
    # page that holds a tracked object.
    import gc
    gc.collect()
    gc.freeze()


def reactor_serve():
    kernel, requests = _reactor
    while True:
        try:
            kind, payload = requests.next()
        except EOFError:
            requests.buf = b""
            return
        try:
            _serve(kernel, kind, payload)
        except BaseException as e:  # an interrupt that missed the cell
            kernel.running = False
            _error(e, [type(e).__name__])
            _flush_user_streams()
            _write_all(1, _DONE)


if __name__ == "__main__":
    _main()
