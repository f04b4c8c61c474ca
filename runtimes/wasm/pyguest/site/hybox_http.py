"""HTTP(S) requests from a hybox wasm sandbox.

The guest has no sockets: every request is handed to the host, which applies
the sandbox's egress policy and credentials and performs it. Denied or failed
requests raise urllib.error.URLError whose reason is the host's explanation
(a denial names the policy rule).

    import hybox_http
    with hybox_http.urlopen("https://example.com/api", headers={"Accept": "application/json"}) as r:
        print(r.status, r.headers["Content-Type"], r.json())

urllib.request.urlopen (and openers built by urllib.request.build_opener)
and http.client's HTTPConnection and HTTPSConnection use the same channel:
the start-up hook patches urllib.request and http.client when they are
first imported.
"""

import io as _io
import json as _json
import os as _os
import struct as _struct
import urllib.error as _uerror
import urllib.response as _uresponse

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
    # Imported here: the start-up hook patches http.client through this
    # module, so this module must not import it first.
    from http.client import HTTPMessage

    msg = HTTPMessage()
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
    """Wraps the loader of urllib.request or http.client to route their
    requests through the host once the module has run."""

    def __init__(self, loader, install):
        self.loader = loader
        self.install = install

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.install(module)


def _find_spec(hook, name, path, target):
    """The start-up hook's meta path finder (hook) defers urllib.request and
    http.client to this: the spec the other finders give, with a loader that
    patches the module after it has run."""
    import sys

    install = _INSTALLERS[name]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if finder is hook or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            if hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader, install)
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


class _HostSocket:
    """The socket of a patched http.client connection. It collects the
    request that http.client writes; when http.client reads the response,
    the request is performed through the host, and a complete HTTP/1.1
    response (Content-Length framed, Connection: close) is what http.client
    parses. Each request is decided by the sandbox's policy, and redirects
    are returned, not followed, as from a real connection."""

    def __init__(self, conn, scheme):
        self._conn = conn
        self._scheme = scheme
        self._out = bytearray()
        self._done = False

    def sendall(self, data):
        if self._done:  # a new request
            self._out = bytearray()
            self._done = False
        self._out += data
        if len(self._out) > MAX_BODY + (1 << 20):
            raise OSError("request of more than %d MiB" % (MAX_BODY >> 20))

    def send(self, data):
        self.sendall(data)
        return len(data)

    def makefile(self, mode="rb", *args, **kwargs):
        if "r" not in mode:
            raise OSError("a hybox sandbox's HTTP connection is written with sendall")
        self._done = True
        try:
            raw = self._perform()
        except BaseException:
            self._conn.close()  # back to idle: the connection can be used again
            raise
        return _io.BytesIO(raw)

    def settimeout(self, timeout):
        pass

    def setsockopt(self, *args):
        pass

    def close(self):
        pass

    def _perform(self):
        raw = bytes(self._out)
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if not sep:
            raise OSError("incomplete HTTP request")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            raise OSError("malformed request line %r" % lines[0])
        method, target = parts[0], parts[1]
        headers, chunked, length = [], False, None
        for line in lines[1:]:
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            lk = k.lower()
            if lk == "transfer-encoding":
                chunked = "chunked" in v.lower()
            elif lk == "content-length":
                length = int(v)
            elif lk != "connection":
                headers.append((k, v))
        if chunked:
            body = _dechunk(rest)
        elif length is not None:
            body = rest[:length]
        else:
            body = rest
        if target.startswith(("http://", "https://")):
            url = target
        else:
            host = self._conn.host
            if ":" in host:
                host = "[%s]" % host
            default = 443 if self._scheme == "https" else 80
            if self._conn.port != default:
                host += ":%d" % self._conn.port
            url = "%s://%s%s" % (self._scheme, host, target)
        timeout = self._conn.timeout
        resp = _perform(method, url, headers, body, timeout if isinstance(timeout, (int, float)) else None, "manual")
        out = ["HTTP/1.1 %d %s" % (resp.status, resp.reason)]
        for k, v in resp.headers.items():
            if k.lower() in ("transfer-encoding", "connection") or (k.lower() == "content-length" and method != "HEAD"):
                continue
            out.append("%s: %s" % (k, v))
        if method != "HEAD":
            out.append("Content-Length: %d" % len(resp._body))
        out.append("Connection: close")
        return ("\r\n".join(out) + "\r\n\r\n").encode("utf-8") + resp._body


def _dechunk(data):
    """Decodes a chunked request body (trailers are dropped)."""
    out = bytearray()
    while True:
        line, sep, data = data.partition(b"\r\n")
        if not sep:
            raise OSError("truncated chunked request body")
        size = int(line.split(b";")[0].strip(), 16)
        if size == 0:
            return bytes(out)
        if len(data) < size + 2:
            raise OSError("truncated chunked request body")
        out += data[:size]
        data = data[size + 2:]


def _install_http_client(client):
    """Makes http.client's connections reach the host: connect() gives them a
    _HostSocket. Without the ssl module http.client has no HTTPSConnection;
    one is added (the host verifies the server's certificate, so context
    and certificate arguments are accepted and not used)."""
    if getattr(client, "_hybox_installed", False):
        return

    def connect(self):
        if self._tunnel_host:
            raise OSError("HTTP tunnels (set_tunnel) are not supported in a hybox sandbox")
        https = isinstance(self, client.HTTPSConnection)
        self.sock = _HostSocket(self, "https" if https else "http")

    if not hasattr(client, "HTTPSConnection"):

        class HTTPSConnection(client.HTTPConnection):
            """HTTPS through the hybox host (which makes the TLS connection)."""

            default_port = client.HTTPS_PORT

            def __init__(self, host, port=None, *, timeout=client.socket._GLOBAL_DEFAULT_TIMEOUT,
                         source_address=None, context=None, blocksize=8192, **kwargs):
                super().__init__(host, port, timeout=timeout, source_address=source_address, blocksize=blocksize)

        HTTPSConnection.__module__ = client.__name__
        # urllib.request's HTTPSHandler builds a context with it.
        client._create_https_context = lambda *args, **kwargs: None
        client.HTTPSConnection = HTTPSConnection
        if "HTTPSConnection" not in client.__all__:
            client.__all__.append("HTTPSConnection")
    client.HTTPConnection.connect = connect
    client.HTTPSConnection.connect = connect
    client._hybox_installed = True


def _install_socket(socket):
    """WASI's socket module has no gethostname: it answers the sandbox's
    /etc/hostname, as the shell's hostname does."""
    if hasattr(socket, "gethostname"):
        return

    def gethostname():
        try:
            with open("/etc/hostname") as f:
                return f.readline().strip() or "localhost"
        except OSError:
            return "localhost"

    socket.gethostname = gethostname


_INSTALLERS = {"urllib.request": _install_urllib, "http.client": _install_http_client, "socket": _install_socket}
