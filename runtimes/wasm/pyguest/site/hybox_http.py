"""HTTP(S) requests from a hybox wasm sandbox.

The guest has no sockets: every request is handed to the host, which applies
the sandbox's egress policy and credentials and performs it. Denied or failed
requests raise urllib.error.URLError whose reason is the host's explanation
(a denial names the policy rule).

    import hybox_http
    with hybox_http.urlopen("https://example.com/api", headers={"Accept": "application/json"}) as r:
        print(r.status, r.headers["Content-Type"], r.json())

urllib.request.urlopen (and openers built by urllib.request.build_opener)
use the same channel: the start-up hook patches urllib.request when it is
first imported.
"""

import io as _io
import json as _json
import os as _os
import struct as _struct
import urllib.error as _uerror
import urllib.response as _uresponse
from http.client import HTTPMessage as _HTTPMessage

__all__ = ["urlopen", "Response", "HTTPError", "URLError", "MAX_BODY"]

HTTPError = _uerror.HTTPError
URLError = _uerror.URLError

# Must match pyguest/egress.go.
_DEVICE = "/.hybox/egress/http"
_REQUEST_MAGIC = b"HBQ1"
_RESPONSE_MAGIC = b"HBR1"
_HEADER = _struct.Struct(">4sIQ")
MAX_BODY = 64 << 20
_USER_AGENT = "Python-urllib/3.12"


class Response(_uresponse.addinfourl):
    """A complete HTTP response, file-like (read, readline, iteration) and a
    context manager, like the object urllib.request.urlopen returns.

    status, reason, url, headers (an http.client.HTTPMessage: case-insensitive
    get, items, get_all), redirected; json() and text() decode the body.
    """

    def __init__(self, url, status, reason, headers, body, redirected=False):
        super().__init__(_io.BytesIO(body), headers, url, status)
        self.reason = reason
        self.msg = reason  # urllib's handlers read the reason from .msg
        self.redirected = redirected
        self._body = body

    def json(self, **kwargs):
        """Decodes the whole body as JSON."""
        return _json.loads(self._body, **kwargs)

    def text(self, encoding=None, errors="replace"):
        """Decodes the whole body (charset of Content-Type, else UTF-8)."""
        return self._body.decode(encoding or self.headers.get_content_charset() or "utf-8", errors)

    def __repr__(self):
        return "<hybox_http.Response [%d %s] %s>" % (self.status, self.reason, self.url)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = _os.write(fd, view)
        if n <= 0:
            raise OSError("short write to the egress channel")
        view = view[n:]


def _read_exact(fd, n):
    parts = []
    while n > 0:
        b = _os.read(fd, min(n, 1 << 20))
        if not b:
            raise OSError("truncated reply from the egress channel")
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _exchange(head, body):
    """Sends one request to the host; returns (response head, body)."""
    if len(body) > MAX_BODY:
        raise URLError("request body of %d bytes exceeds the %d MiB limit" % (len(body), MAX_BODY >> 20))
    h = _json.dumps(head).encode("utf-8")
    try:
        fd = _os.open(_DEVICE, _os.O_RDWR)
    except OSError as e:
        raise URLError("the hybox egress channel is unavailable (%s)" % e) from None
    try:
        _write_all(fd, _HEADER.pack(_REQUEST_MAGIC, len(h), len(body)) + h)
        if body:
            _write_all(fd, body)
        magic, hl, bl = _HEADER.unpack(_read_exact(fd, _HEADER.size))
        if magic != _RESPONSE_MAGIC:
            raise OSError("bad reply from the egress channel")
        rhead = _json.loads(_read_exact(fd, hl))
        rbody = _read_exact(fd, bl)
    except OSError as e:
        raise URLError("the hybox egress channel failed (%s)" % e) from None
    finally:
        _os.close(fd)
    return rhead, rbody


def _body_bytes(data):
    if data is None:
        return b""
    if isinstance(data, str):
        raise TypeError("POST data should be bytes, an iterable of bytes, or a file object. It cannot be of type str.")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        b = data.read()
        if isinstance(b, str):
            raise TypeError("the file object's read() must return bytes, not str")
        return bytes(b)
    try:
        return b"".join(bytes(x) for x in data)
    except TypeError:
        raise TypeError("data must be bytes, an iterable of bytes, or a file object, not %s" % type(data).__name__) from None


def _headers_message(pairs):
    msg = _HTTPMessage()
    for k, v in pairs:
        msg[k] = v
    return msg


def _perform(method, url, headers, body, timeout, redirect):
    head = {"method": method, "url": url, "headers": [[str(k), str(v)] for k, v in headers], "redirect": redirect}
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
        head["timeout"] = float(timeout)
    rhead, rbody = _exchange(head, body)
    if "error" in rhead:
        if rhead.get("timeout"):
            raise URLError(TimeoutError("timed out"))
        raise URLError(rhead["error"])
    return Response(rhead["url"], rhead["status"], rhead["reason"], _headers_message(rhead.get("headers") or []),
                    rbody, rhead.get("redirected", False))


def _has(headers, name):
    name = name.lower()
    return any(k.lower() == name for k, _ in headers)


def urlopen(url, data=None, timeout=None, headers=None, method=None):
    """Performs an HTTP(S) request through the host and returns a Response.

    url is a string or a urllib.request.Request (whose data, headers and
    method are used unless given here). data is the body: bytes, a
    bytes-like object, a file object or an iterable of bytes; with data and
    no method the request is a POST. headers is a mapping or a list of
    (name, value) pairs. timeout, in seconds, bounds the whole request.
    Redirects are followed.

    Raises urllib.error.HTTPError for a status of 400 or more (it is also
    the response: e.code, e.headers, e.read()), and urllib.error.URLError
    when the request fails or the sandbox's policy denies it (e.reason is
    the host's explanation).
    """
    pairs = []
    if hasattr(url, "full_url") and hasattr(url, "get_method"):
        req = url
        url = req.full_url
        if data is None:
            data = req.data
        if method is None:
            method = req.get_method()
        pairs.extend(req.header_items())
        if timeout is None:
            timeout = getattr(req, "timeout", None)
    if headers:
        items = headers.items() if hasattr(headers, "items") else headers
        extra = [(str(k), str(v)) for k, v in items]
        names = {k.lower() for k, _ in extra}
        pairs = [(k, v) for k, v in pairs if k.lower() not in names] + extra
    body = _body_bytes(data)
    if method is None:
        method = "POST" if data is not None else "GET"
    if data is not None and not _has(pairs, "Content-Type"):
        pairs.append(("Content-Type", "application/x-www-form-urlencoded"))
    if not _has(pairs, "User-Agent"):
        pairs.append(("User-Agent", _USER_AGENT))
    resp = _perform(method.upper(), str(url), pairs, body, timeout, "follow")
    if resp.status >= 400:
        raise HTTPError(resp.url, resp.status, resp.reason, resp.headers, _io.BytesIO(resp._body))
    return resp


def _urllib_open(handler, req):
    """http_open/https_open of urllib.request's HTTPHandler in a sandbox.
    Redirects are returned to urllib, whose redirect handler sends each hop
    back here, so the policy sees every host."""
    headers = dict(req.unredirected_hdrs)
    headers.update(req.headers)
    headers = {k.title(): v for k, v in headers.items()}
    headers.setdefault("User-Agent", _USER_AGENT)
    headers["Connection"] = "close"
    body = _body_bytes(req.data)
    return _perform(req.get_method(), req.full_url, list(headers.items()), body,
                    getattr(req, "timeout", None), "manual")


class _PatchingLoader:
    """Wraps urllib.request's loader to route its HTTP handlers through the
    host once the module has run."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _install_urllib(module)


def _find_spec(hook, name, path, target):
    """The start-up hook's meta path finder (hook) defers urllib.request to
    this: the spec the other finders give, with a loader that patches the
    module after it has run."""
    import sys

    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if finder is hook or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            if hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader)
            return spec
    return None


def _install_urllib(request):
    """Routes urllib.request's http and https handlers through the host.
    The start-up hook calls it when urllib.request is first imported."""
    if getattr(request, "_hybox_installed", False):
        return

    def http_open(self, req):
        return _urllib_open(self, req)

    h = request.HTTPHandler
    h.http_open = http_open
    # Without the ssl module there is no HTTPSHandler: https goes through
    # the plain handler, which the host turns into TLS.
    h.https_open = http_open
    h.https_request = request.AbstractHTTPHandler.do_request_
    if hasattr(request, "HTTPSHandler"):
        request.HTTPSHandler.https_open = http_open
    request._hybox_installed = True
